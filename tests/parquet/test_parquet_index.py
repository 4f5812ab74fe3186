"""index_parquet: footers only, shards of whole row groups, file identities, and the errors it raises."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_files

from stream_plugin.errors import ConfigError
from stream_plugin.parquet import SchemaDriftError, index_parquet
from stream_plugin.parquet.footer import ParquetFormatError
from stream_plugin.parquet.indexer import fetch_footers
from stream_plugin.storage import LocalStore, RetryPolicy
from stream_plugin.storage.base import ObjectInfo


class CountingStore:
    """A local folder read through ranges, counting the bytes read."""

    def __init__(self, root: Path) -> None:
        self.inner = LocalStore(str(root))
        self.read = 0

    def object_info(self, key: str, *, timeout: float | None = None) -> ObjectInfo:
        return self.inner.object_info(key)

    def read_range(self, key: str, start: int, end: int, *, timeout: float | None = None) -> bytes:
        self.read += end - start
        return self.inner.read_range(key, start, end)


def _shards(folder: Path) -> list[dict]:
    return json.loads((folder / "index.json").read_text())["shards"]


def test_index_reads_only_footers_of_a_few_hundred_files(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    rng = np.random.default_rng(0)
    payload = pa.table({"blob": [rng.bytes(20_000) for _ in range(4)], "id": np.arange(4)})
    for number in range(300):
        pq.write_table(payload, folder / f"f{number:04d}.parquet", compression="none")
    keys = sorted(path.name for path in folder.iterdir())
    store = CountingStore(folder)
    footers = fetch_footers(store, keys, policy=RetryPolicy())
    total = sum((folder / key).stat().st_size for key in keys)
    # One read of each file's last 64 KiB (its footer is within it); the 80 KB of data before it is never read
    assert [footer.key for footer in footers] == keys
    assert store.read == len(keys) * 64 * 1024 < total
    assert all(len(footer.data) < 2000 for footer in footers)
    written = index_parquet(folder, shard_bytes=1 << 20)
    assert (written.files, written.shards, written.rows) == (300, 300, 1200)


def test_row_groups_are_packed_into_shards_with_the_file_identity(parquet_dir: Path) -> None:
    shards = _shards(parquet_dir)
    assert len(shards) == 12
    first = shards[0]["parquet"]
    info = LocalStore(str(parquet_dir)).object_info("part-000.parquet")
    assert (first["file"], first["row_groups"], first["file_bytes"], first["identity"]) == (
        "part-000.parquet", [0, 1], info.size, info.identity
    )
    assert first["source"] is None
    index_parquet(parquet_dir, shard_bytes=1 << 20)
    packed = _shards(parquet_dir)
    assert [shard["parquet"]["row_groups"] for shard in packed] == [[0, 3]] * 4
    assert [shard["samples"] for shard in packed] == [150] * 4


def test_index_in_another_folder_records_the_source(parquet_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    written = index_parquet(parquet_dir, out=out, shard_bytes=1)
    assert written.index_url == f"{out}/index.json"
    assert {shard["parquet"]["source"] for shard in _shards(out)} == {str(parquet_dir)}


def test_schema_drift_names_the_file_and_the_column(tmp_path: Path) -> None:
    write_files(tmp_path, files=2)
    pq.write_table(pa.table({"id": np.arange(3), "text": [1, 2, 3], "score": np.ones(3, np.float32)}), tmp_path / "part-009.parquet")
    with pytest.raises(SchemaDriftError, match=r"part-009.parquet: expected the schema of part-000.parquet, found column 'text' as int64 \(in part-000.parquet: string\)"):
        index_parquet(tmp_path)


def test_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    write_files(tmp_path, files=1)
    (tmp_path / "notes.parquet").write_bytes(b"just some text, not parquet at all")
    with pytest.raises(ParquetFormatError, match=r"notes.parquet: expected a Parquet file \(ending with the magic bytes b'PAR1'\), found it ends with b' all'"):
        index_parquet(tmp_path)


def test_a_truncated_footer_is_refused(tmp_path: Path) -> None:
    write_files(tmp_path, files=1)
    data = (tmp_path / "part-000.parquet").read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    (tmp_path / "cut.parquet").write_bytes(data[:4] + data[-8 - length // 2 :-8] + (length).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(ParquetFormatError, match=r"cut.parquet: expected a footer of at most \d+ bytes"):
        index_parquet(tmp_path)


def test_a_folder_without_parquet_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(ConfigError, match="expected a folder holding \\*.parquet files, found none"):
        index_parquet(tmp_path)


def test_a_bad_shard_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="shard_bytes: expected a positive number of bytes per shard, found 0"):
        index_parquet(tmp_path, shard_bytes=0)


def test_without_pyarrow_the_error_names_the_parquet_extra() -> None:
    import subprocess
    import sys

    hide = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pyarrow':\n"
        "            raise ImportError('No module named pyarrow')\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from stream_plugin import index_parquet\n"
    )
    result = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "pip install 'stream-plugin[parquet]'" in result.stderr
