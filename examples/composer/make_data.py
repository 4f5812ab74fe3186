"""Write the tiny MDS dataset ``tiny.yaml`` reads: ``samples`` rows of ``{id: int64, x: float32[4]}``.

Usage: ``python examples/composer/make_data.py runs/data/tiny --samples 400``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from stream_plugin import MDSWriter


def write_tiny_dataset(out: str | Path, samples: int = 400, shard_bytes: int = 4096) -> Path:
    """Write ``samples`` rows into small shards (several shards, so shard shuffling matters)."""
    generator = np.random.default_rng(0)
    with MDSWriter(
        out=str(out), columns={"id": "int64", "x": "ndarray:float32:4"}, size_limit=shard_bytes
    ) as writer:
        for sample_id in range(samples):
            writer.write({"id": sample_id, "x": generator.normal(size=4).astype(np.float32)})
    return Path(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="output folder (must not exist)")
    parser.add_argument("--samples", type=int, default=400)
    args = parser.parse_args()
    print(write_tiny_dataset(args.out, args.samples))


if __name__ == "__main__":
    main()
