"""Hugging Face Trainer integration for stream_plugin: every sample of the epoch once over the ranks, in
our order, and an exact resume from the Trainer's own ``checkpoint-N`` folders.

```python
from stream_plugin import StreamingDataset
from stream_plugin_transformers import PreemptionCheckpoint, StreamingTrainer, latest_checkpoint

trainer = StreamingTrainer(model=model, args=args, train_dataset=StreamingDataset(remote=..., shuffle=True),
                           callbacks=[PreemptionCheckpoint()])
trainer.train(resume_from_checkpoint=latest_checkpoint(args.output_dir))
```
"""

# The hint comes first, so a missing extra is named before a submodule fails on it.
# ruff: noqa: E402
from stream_plugin import __version__
from stream_plugin.extras import require_extra

require_extra("transformers", extra="hf-train", needed_by="stream_plugin_transformers")

from stream_plugin_transformers.callbacks import DataStateCheckpoint
from stream_plugin_transformers.data_state import DATA_STATE_FILE, latest_checkpoint, read_data_state
from stream_plugin_transformers.preemption import Preempted, PreemptionCheckpoint
from stream_plugin_transformers.trainer import StreamingTrainer, StreamingTrainerMixin

__all__ = [
    "__version__",
    "DATA_STATE_FILE",
    "DataStateCheckpoint",
    "Preempted",
    "PreemptionCheckpoint",
    "StreamingTrainer",
    "StreamingTrainerMixin",
    "latest_checkpoint",
    "read_data_state",
]
