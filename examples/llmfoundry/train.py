"""llm-foundry's trainer on a YAML file, as its ``scripts/train/train.py`` runs it (the wheel does not ship
that script):

    python examples/llmfoundry/train.py examples/llmfoundry/tiny_text.yaml [key=value ...]
    composer -n 2 examples/llmfoundry/train.py examples/llmfoundry/tiny_text.yaml [key=value ...]
"""

import sys

from llmfoundry.command_utils import train_from_yaml

if __name__ == "__main__":
    train_from_yaml(sys.argv[1], sys.argv[2:])
