"""Hostile or implausible inputs stop with our errors, before any unbounded allocation, recursion or disk use:
decompression bombs, implausible index entries, and a full disk under a writer."""

from __future__ import annotations

import copy
import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from writer_rig import TEXT_COLUMNS, make_writer, text_samples

from stream_plugin.errors import IndexFormatError, ShardIntegrityError, StorageError
from stream_plugin.format import writer_base
from stream_plugin.format.compression import compress, decompress_file
from stream_plugin.format.hashing import hash_data
from stream_plugin.format.index import INDEX_BASENAME, parse_index

BOMB_RAW = 60 << 20  # 60 MiB of zeros compress to a few KiB
DECLARED = 1000


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    zeros = bytes(BOMB_RAW)
    return {family: compress(family, zeros) for family in ("zstd", "gz", "bz2")}


@pytest.mark.parametrize("family", ["zstd", "gz", "bz2"])
def test_decompression_stops_as_soon_as_output_passes_the_declared_size(
    family: str, bombs: dict[str, bytes], tmp_path: Path
) -> None:
    assert len(bombs[family]) < 1 << 17
    (tmp_path / "bomb").write_bytes(bombs[family])
    with pytest.raises(ShardIntegrityError, match=rf"decompresses past the {DECLARED} bytes that index.json records .*decompression bomb"):
        decompress_file(family, tmp_path / "bomb", tmp_path / "out", expected_size=DECLARED)
    assert not (tmp_path / "out").exists()


def test_a_brotli_bomb_stops_at_the_declared_size(tmp_path: Path) -> None:
    pytest.importorskip("brotli")
    (tmp_path / "bomb").write_bytes(compress("br:1", bytes(8 << 20)))
    with pytest.raises(ShardIntegrityError, match="decompresses past the 1000 bytes"):
        decompress_file("br", tmp_path / "bomb", tmp_path / "out", expected_size=DECLARED)


def bomb_dataset(folder: Path, bomb: bytes) -> Path:
    """An MDS stream whose one shard is stored as a zstd bomb while the index declares 1000 raw bytes."""
    folder.mkdir(parents=True)
    (folder / "shard.00000.mds.zstd").write_bytes(bomb)
    entry = {
        "version": 2, "format": "mds", "compression": "zstd", "hashes": ["sha1"], "size_limit": None,
        "samples": 1, "column_encodings": ["int"], "column_names": ["i"], "column_sizes": [8],
        "raw_data": {"basename": "shard.00000.mds", "bytes": DECLARED, "hashes": {}},
        "zip_data": {"basename": "shard.00000.mds.zstd", "bytes": len(bomb), "hashes": {"sha1": hash_data("sha1", bomb)}},
    }  # fmt: skip
    (folder / INDEX_BASENAME).write_text(json.dumps({"version": 2, "shards": [entry]}))
    return folder


def test_the_cache_refuses_a_bomb_without_filling_the_disk(bombs: dict[str, bytes], tmp_path: Path) -> None:
    from stream_plugin.cache import CacheConfig, ShardCache

    remote = bomb_dataset(tmp_path / "remote", bombs["zstd"])
    cache = ShardCache(CacheConfig(local=str(tmp_path / "cache"), remote=str(remote), download_retry=0))
    (entry,) = cache.open_index()
    with pytest.raises(ShardIntegrityError, match="decompresses past the 1000 bytes"):
        cache.ensure(entry)
    assert sum(path.stat().st_size for path in (tmp_path / "cache").rglob("*") if path.is_file()) < 1 << 20


def test_verify_refuses_a_bomb(bombs: dict[str, bytes], tmp_path: Path) -> None:
    remote = bomb_dataset(tmp_path / "remote", bombs["zstd"])
    script = Path(sys.executable).with_name("stream-plugin")
    result = subprocess.run([str(script), "verify", str(remote)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "decompresses past the 1000 bytes" in result.stdout + result.stderr


# ---- implausible index entries ----

GOOD_ENTRY: dict[str, Any] = {
    "version": 2, "format": "mds", "compression": None, "hashes": [], "size_limit": None, "samples": 10,
    "raw_data": {"basename": "shard.00000.mds", "bytes": 500, "hashes": {}}, "zip_data": None,
}  # fmt: skip


def index_with(*entries: dict[str, Any]) -> str:
    return json.dumps({"version": 2, "shards": list(entries)})


def mutated(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    entry = copy.deepcopy(GOOD_ENTRY)
    target = entry
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return entry


def test_a_plausible_index_parses() -> None:
    assert parse_index(index_with(GOOD_ENTRY))[0].samples == 10


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("samples",), 501, r"expected samples to be at most the 500 raw bytes"),
        (("samples",), -1, r"samples: expected an int >= 0, found -1; regenerate the index"),
        (("raw_data", "bytes"), 10**15, r"raw_data\.bytes: expected an int in \[0, \d+\], found 1000000000000000"),
        (("raw_data", "bytes"), -5, r"raw_data\.bytes: expected an int in \[0, \d+\], found -5"),
        (("raw_data", "basename"), "shard\x00.mds", r"raw_data: expected a basename without NUL bytes"),
        (("raw_data", "hashes"), {"sha1": 7}, r"expected raw_data\.hashes to be an object of digest strings"),
    ],
)
def test_implausible_index_fields_get_an_index_format_error_naming_the_field(
    path: tuple[str, ...], value: Any, message: str
) -> None:
    with pytest.raises(IndexFormatError, match=message):
        parse_index(index_with(mutated(path, value)))


def test_duplicate_shard_entries_are_refused() -> None:
    with pytest.raises(IndexFormatError, match=r"shard 1: expected each file to belong to one shard entry, found raw basename 'shard.00000.mds' already in shard 0"):
        parse_index(index_with(GOOD_ENTRY, GOOD_ENTRY))


def test_deeply_nested_json_is_an_index_format_error_not_a_recursion_error() -> None:
    depth = 10**5
    with pytest.raises(IndexFormatError, match="nested too deeply to parse"):
        parse_index('{"version": 2, "shards": [' + "[" * depth + "]" * depth + "]}")


# ---- a full disk under a writer ----


def test_a_writer_on_a_full_disk_raises_a_storage_error_naming_folder_and_bytes_and_leaves_no_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = writer_base.atomic_write_bytes

    def full_after_one_shard(path: str | os.PathLike[str], data: bytes, **options: Any) -> None:
        if Path(path).name != "shard.00000.mds":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real_write(path, data, **options)

    monkeypatch.setattr(writer_base, "atomic_write_bytes", full_after_one_shard)
    with (
        pytest.raises(StorageError, match=rf"{tmp_path}: expected room for \d+ more bytes \(shard\.00001\.mds\), found the disk full"),
        make_writer("mds", str(tmp_path), TEXT_COLUMNS, size_limit=300) as writer,
    ):
        for sample in text_samples(100):
            writer.write(sample)
    assert not (tmp_path / INDEX_BASENAME).exists()
