"""Write the data ``config.yaml`` trains on: three streams and a validation set, as MDS shards.

Usage: ``python examples/lightning/make_data.py`` writes them under the folder the config names
(``/tmp/stream-plugin-main-job/remote``); ``--out DIR`` writes elsewhere (then edit the config's paths).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # example_data, when run from another folder

from example_data import write_example_data  # noqa: E402

DEFAULT_OUT = Path("/tmp/stream-plugin-main-job/remote")  # the folder config.yaml reads (file://)


def main(args: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    options = parser.parse_args(args)
    shards = write_example_data(options.out)
    print(f"wrote {', '.join(f'{name} ({count} shards)' for name, count in shards.items())} under {options.out}")


if __name__ == "__main__":
    main()
