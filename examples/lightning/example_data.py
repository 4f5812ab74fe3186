"""The example's data: three streams of different sizes and a validation set, as MDS shards.

Each sample has an ``id`` (unique over all streams: web 0.., books 100000.., code 200000..), 8 features
``x`` and a target ``y = sum(x)``. Shards are kept small so that even this tiny dataset has many.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stream_plugin import MDSWriter

STREAM_SIZES = {"web": 240, "books": 120, "code": 80}
VAL_SIZE = 48
_ID_BASE = {"web": 0, "books": 100_000, "code": 200_000, "val": 900_000}
COLUMNS = {"id": "int", "x": "ndarray:float32", "y": "float32"}


def _sample(sample_id: int) -> dict[str, object]:
    # Features from a per-sample generator: the same bytes on every run.
    x = np.random.default_rng(sample_id).standard_normal(8).astype(np.float32)
    return {"id": sample_id, "x": x, "y": float(x.sum())}


def write_example_data(remote_root: Path) -> dict[str, int]:
    """Write every stream and the val set under ``remote_root``; return the shard count per folder."""
    shards = {}
    for name, size in {**STREAM_SIZES, "val": VAL_SIZE}.items():
        out = remote_root / name
        with MDSWriter(out=str(out), columns=COLUMNS, size_limit=2 << 10, compression="zstd") as writer:
            for offset in range(size):
                writer.write(_sample(_ID_BASE[name] + offset))
        shards[name] = len(list(out.glob("shard.*.mds*")))
    return shards
