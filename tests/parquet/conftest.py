"""Small Parquet datasets for the Parquet tests, and an MDS twin with the same per-shard sample counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stream_plugin import MDSWriter
from stream_plugin.parquet import index_parquet

FILES = 4
ROWS_PER_GROUP = 50
GROUPS_PER_FILE = 3  # one shard per row group with a tiny shard_bytes: 12 shards of 50 rows
TOTAL = FILES * ROWS_PER_GROUP * GROUPS_PER_FILE


def write_files(folder: Path, *, files: int = FILES, groups: int = GROUPS_PER_FILE, rows: int = ROWS_PER_GROUP) -> None:
    """``files`` Parquet files of ``groups`` row groups of ``rows`` rows; ``id`` runs 0.. across files."""
    folder.mkdir(parents=True, exist_ok=True)
    per_file = groups * rows
    for number in range(files):
        ids = np.arange(number * per_file, (number + 1) * per_file, dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "text": [f"row {i}" for i in ids.tolist()],
                "score": ids.astype(np.float32) / 2,
            }
        )
        pq.write_table(table, folder / f"part-{number:03d}.parquet", row_group_size=rows)


@pytest.fixture
def parquet_dir(tmp_path: Path) -> Path:
    """12 shards of 50 rows (4 files x 3 row groups), indexed beside the data."""
    folder = tmp_path / "pq"
    write_files(folder)
    index_parquet(folder, shard_bytes=1)
    return folder


@pytest.fixture
def mds_twin(tmp_path: Path) -> Path:
    """The same rows as ``parquet_dir`` in MDS, in shards of the same sample counts."""
    folder = tmp_path / "mds"
    with MDSWriter(out=str(folder), columns={"id": "int64", "text": "str", "score": "float32"}, size_limit=None) as writer:
        for i in range(TOTAL):
            writer.write({"id": np.int64(i), "text": f"row {i}", "score": np.float32(i / 2)})
            if (i + 1) % ROWS_PER_GROUP == 0:
                writer.flush_shard()
    return folder
