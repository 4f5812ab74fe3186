"""Shard readers: batched columnar reads, zero-copy arrays, raw bytes, empty shards, lifetimes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from writer_rig import TEXT_COLUMNS, read_dataset, text_samples, write_dataset

from stream_plugin.format.index import load_index, write_index
from stream_plugin.format.mds import MDSShardReader, build_shard
from stream_plugin.format.reader import check_shard_file, materialize_shard, open_shard
from stream_plugin.format.shard_file import build_meta, config_bytes

MIXED_COLUMNS = {
    "id": "int",
    "label": "uint8",
    "name": "str",
    "score": "float64",
    "tokens": "ndarray:int32",
    "patch": "ndarray:uint8:2,3",
}


def _mixed_samples(count: int) -> list[dict]:
    return [
        {
            "id": 10 * i - 5,
            "label": np.uint8(i % 7),
            "name": "n" * (i % 5),
            "score": np.float64(i / 3),
            "tokens": np.arange(i % 4 + 1, dtype=np.int32),
            "patch": np.full((2, 3), i, np.uint8),
        }
        for i in range(count)
    ]


@pytest.fixture
def mixed_shard(tmp_path: Path) -> Iterator[MDSShardReader]:
    write_dataset("mds", str(tmp_path), _mixed_samples(50), MIXED_COLUMNS, size_limit=None)
    (entry,) = load_index(tmp_path)
    reader = open_shard(entry, tmp_path)
    yield reader
    reader.close()


def test_read_columns_equals_reading_sample_by_sample(mixed_shard: MDSShardReader) -> None:
    indices = np.array([49, 0, 7, 7, 23])
    columns = mixed_shard.read_columns(indices)
    samples = [mixed_shard.read(int(i)) for i in indices]
    for name in MIXED_COLUMNS:
        for batched, sample in zip(columns[name], samples):
            assert np.array_equal(batched, sample[name]), name
    assert columns["patch"].shape == (5, 2, 3) and columns["patch"].dtype == np.uint8
    assert columns["score"].dtype == np.float64 and columns["id"].tolist() == [485, -5, 65, 65, 225]
    assert isinstance(columns["tokens"], list) and isinstance(columns["name"], list)


def test_read_columns_gathers_fixed_size_columns_without_per_sample_decoding(
    mixed_shard: MDSShardReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[int] = []
    real = MDSShardReader._decode_each
    monkeypatch.setattr(
        MDSShardReader,
        "_decode_each",
        lambda self, enc, b, s: decoded.append(len(b)) or real(self, enc, b, s),
    )
    columns = mixed_shard.read_columns(range(50))
    assert len(decoded) == 2  # only the two variable-size columns (name, tokens) go through Python
    assert columns["label"].tolist() == [i % 7 for i in range(50)]


def test_read_columns_of_no_indices_gives_empty_columns(mixed_shard: MDSShardReader) -> None:
    columns = mixed_shard.read_columns([])
    assert columns["patch"].shape == (0, 2, 3) and columns["name"] == []


def test_out_of_range_index_is_refused_with_the_shard_name(mixed_shard: MDSShardReader) -> None:
    with pytest.raises(
        IndexError, match=r"shard\.00000\.mds: expected a sample index in \[0, 50\), found 50"
    ):
        mixed_shard.read(50)
    with pytest.raises(IndexError, match=r"expected sample indices in \[0, 50\), found -1\.\.3"):
        mixed_shard.read_columns([3, -1])


def test_ndarray_columns_are_read_only_views_that_outlive_close(tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path), _mixed_samples(3), MIXED_COLUMNS)
    (entry,) = load_index(tmp_path)
    reader = open_shard(entry, tmp_path)
    tokens = reader.read(2)["tokens"]
    assert not tokens.flags.owndata and not tokens.flags.writeable
    reader.close()
    assert tokens.tolist() == [0, 1, 2]


def test_raw_sample_is_the_stored_sample_bytes(mixed_shard: MDSShardReader) -> None:
    raw = mixed_shard.raw_sample(3)
    assert isinstance(raw, memoryview)
    columns = mixed_shard.raw_columns(3)
    sizes = np.frombuffer(raw[:8], "<u4").tolist()  # two variable-size columns: name, tokens
    assert sizes == [len(columns["name"]), len(columns["tokens"])]
    assert bytes(raw[8:]) == b"".join(bytes(columns[name]) for name in sorted(MIXED_COLUMNS))


@pytest.mark.parametrize("fmt", ["json", "csv", "tsv", "xsv"])
def test_text_readers_give_columns_and_raw_lines(fmt: str, tmp_path: Path) -> None:
    samples = text_samples(20)
    write_dataset(fmt, str(tmp_path), samples, TEXT_COLUMNS)
    (entry,) = load_index(tmp_path)
    reader = open_shard(entry, tmp_path)
    assert reader.read_columns([4, 2]) == {
        name: [samples[4][name], samples[2][name]] for name in sorted(TEXT_COLUMNS)
    }
    assert bytes(reader.raw_sample(0)).endswith(b"\n")
    reader.close()


def test_empty_shards_in_front_are_readable(tmp_path: Path) -> None:
    """MosaicML writes an empty shard before a first sample larger than size_limit; read past it."""
    write_dataset("mds", str(tmp_path / "mds"), text_samples(3), TEXT_COLUMNS)
    (entry,) = load_index(tmp_path / "mds")
    config = {
        key: value for key, value in entry.config.items() if key not in ("samples", "raw_data", "zip_data")
    }
    empty = build_shard([], config_bytes(config))
    (tmp_path / "mds" / "shard.00000.mds").rename(tmp_path / "mds" / "shard.00001.mds")
    (tmp_path / "mds" / "shard.00000.mds").write_bytes(empty)
    empty_entry = {
        **config,
        "samples": 0,
        "raw_data": {"basename": "shard.00000.mds", "bytes": len(empty), "hashes": {}},
    }
    moved = {**entry.config, "raw_data": {**entry.config["raw_data"], "basename": "shard.00001.mds"}}
    write_index(tmp_path / "mds", [empty_entry, moved])
    assert read_dataset(tmp_path / "mds") == text_samples(3)
    assert open_shard(load_index(tmp_path / "mds")[0], tmp_path / "mds").read_columns([])["n"].shape == (0,)


def test_an_empty_json_shard_is_readable(tmp_path: Path) -> None:
    config = {"columns": TEXT_COLUMNS, "newline": "\n", "format": "json", "version": 2}
    meta = build_meta(0, [], config_bytes(config))
    (tmp_path / "shard.00000.json").write_bytes(b"")
    (tmp_path / "shard.00000.json.meta").write_bytes(meta)
    entry = {
        **config,
        "samples": 0,
        "raw_data": {"basename": "shard.00000.json", "bytes": 0, "hashes": {}},
        "raw_meta": {"basename": "shard.00000.json.meta", "bytes": len(meta), "hashes": {}},
    }
    write_index(tmp_path, [entry])
    assert read_dataset(tmp_path) == []


@pytest.mark.parametrize("fmt", ["mds", "json"])
def test_materialize_is_idempotent_and_can_drop_the_compressed_files(fmt: str, tmp_path: Path) -> None:
    write_dataset(fmt, str(tmp_path), text_samples(30), TEXT_COLUMNS, compression="br", hashes=["md5"])
    (entry,) = load_index(tmp_path)
    materialize_shard(entry, tmp_path, validate_hash=True)
    stamp = (tmp_path / entry.raw_data.basename).stat().st_mtime_ns
    materialize_shard(entry, tmp_path, keep_zip=False, validate_hash=True)
    assert (tmp_path / entry.raw_data.basename).stat().st_mtime_ns == stamp  # not decompressed again
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["index.json", *(raw.basename for raw, _ in entry.file_pairs())]
    )
    check_shard_file(entry, tmp_path, validate_hash=True)
    assert read_dataset(tmp_path) == text_samples(30)
