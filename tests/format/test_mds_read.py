"""The MDS read written out per column layout (``format/mds_read.py``): the same values as each
encoding's ``decode``, whatever the order of fixed and variable columns; corrupt samples, closed
readers and hostile column names."""

from __future__ import annotations

import gc
import struct
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from writer_rig import write_dataset

from stream_plugin.errors import ShardIntegrityError
from stream_plugin.format.encodings import get_encoding
from stream_plugin.format.index import load_index
from stream_plugin.format.mds import MDSShardReader
from stream_plugin.format.mds_read import _compiled, compile_read
from stream_plugin.format.reader import open_shard

_VALUES: dict[str, Any] = {
    "int": lambda i: 7 * i - 20,
    "int64": lambda i: np.int64(-3 * i),
    "uint8": lambda i: np.uint8(i % 200),
    "float32": lambda i: np.float32(i / 4),
    "float64": lambda i: np.float64(i / 3),
    "bytes": lambda i: bytes(range(i % 9)),
    "str": lambda i: "é" * (i % 4),
    "json": lambda i: {"i": i, "list": [i] * (i % 3)},
    "str_int": lambda i: i * 11,
    "ndarray:int32": lambda i: np.arange(i % 5 + 1, dtype=np.int32),
    "ndarray:uint8:2,3": lambda i: np.full((2, 3), i % 250, np.uint8),
}

# Column name -> encoding; names sort into the stored order, so each layout puts its fixed-size and
# variable-size columns in a different order: fixed runs (one struct call) before, between and after
# variable columns, only fixed columns, only variable ones, fixed-size columns without a struct form.
LAYOUTS = {
    "variable then fixed": {"data": "bytes", "id": "int"},
    "fixed run between variables": {"a": "str", "b": "int", "c": "int", "d": "bytes", "e": "int"},
    "fixed only": {"a": "int", "b": "int", "c": "float64", "d": "int"},
    "variable only": {"a": "bytes", "b": "str", "c": "json"},
    "one bytes column": {"tokens": "bytes"},
    "mixed": {
        "a": "int",
        "b": "uint8",
        "c": "str",
        "d": "float32",
        "e": "ndarray:int32",
        "f": "ndarray:uint8:2,3",
        "g": "int",
        "h": "str_int",
        "i": "int64",
    },
}


def _samples(columns: dict[str, str], count: int) -> list[dict[str, Any]]:
    return [{name: _VALUES[encoding](i) for name, encoding in columns.items()} for i in range(count)]


def _open(tmp_path: Path, columns: dict[str, str], count: int = 40) -> MDSShardReader:
    write_dataset("mds", str(tmp_path), _samples(columns, count), columns, size_limit=None)
    (entry,) = load_index(tmp_path)
    reader = open_shard(entry, tmp_path)
    assert isinstance(reader, MDSShardReader)
    return reader


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        return type(left) is type(right) and left.dtype == right.dtype and np.array_equal(left, right)
    return type(left) is type(right) and left == right


@pytest.mark.parametrize("layout", LAYOUTS)
def test_compiled_read_equals_each_encodings_decode(layout: str, tmp_path: Path) -> None:
    columns = LAYOUTS[layout]
    reader = _open(tmp_path, columns)
    try:
        for index in [0, 39, 17, 3, 3]:
            sample = reader.read(index)
            assert list(sample) == sorted(columns)  # the stored (sorted-name) order
            for name, raw in reader.raw_columns(index).items():
                expected = get_encoding(columns[name]).decode(raw)
                assert _same(sample[name], expected), (layout, name, index)
            written = _samples(columns, 40)[index]
            assert all(_same(sample[name], written[name]) for name in columns), (layout, index)
    finally:
        reader.close()


def test_compiled_read_refuses_an_index_outside_the_shard(tmp_path: Path) -> None:
    reader = _open(tmp_path, LAYOUTS["variable then fixed"])
    try:
        for index in (-1, 40, 10**12):
            with pytest.raises(IndexError, match=r"expected a sample index in \[0, 40\), found"):
                reader.read(index)
    finally:
        reader.close()


@pytest.mark.parametrize("recorded", [5, 1 << 30])
def test_compiled_read_refuses_a_sample_whose_columns_overrun_it(recorded: int, tmp_path: Path) -> None:
    # Sample 3's recorded size of its bytes column says more bytes than the sample holds: a fixed
    # column after it would be read from the next sample (or past the end of the file).
    reader = _open(tmp_path, LAYOUTS["variable then fixed"])
    path = tmp_path / reader.entry.raw_data.basename
    begin = reader._span(3)[0]
    reader.close()
    data = bytearray(path.read_bytes())
    (size,) = struct.unpack_from("<I", data, begin)
    struct.pack_into("<I", data, begin, size + recorded)
    path.write_bytes(bytes(data))
    reader = _open_again(tmp_path)
    try:
        assert reader.read(2)["id"] == 7 * 2 - 20
        with pytest.raises(ShardIntegrityError, match="expected sample 3 to span 15 bytes.*corrupt"):
            reader.read(3)
    finally:
        reader.close()


def _open_again(folder: Path) -> MDSShardReader:
    (entry,) = load_index(folder)
    reader = open_shard(entry, folder)
    assert isinstance(reader, MDSShardReader)
    return reader


def test_compiled_read_keeps_column_names_out_of_its_source(tmp_path: Path) -> None:
    hostile = {"a'}\nimport os  #": "int", "b\"): raise SystemExit(1) #": "bytes", "{n0}": "str"}
    reader = _open(tmp_path, hostile)
    try:
        sample = reader.read(5)
        assert sample == {"a'}\nimport os  #": 15, "b\"): raise SystemExit(1) #": bytes(range(5)), "{n0}": "é"}
    finally:
        reader.close()


def test_read_after_close_says_the_reader_is_closed(tmp_path: Path) -> None:
    reader = _open(tmp_path, LAYOUTS["mixed"])
    reader.close()
    with pytest.raises(ValueError, match="reader is closed"):
        reader.read(0)


def test_a_dropped_reader_unmaps_without_the_garbage_collector(tmp_path: Path) -> None:
    # The compiled read must not refer back to its reader: a cycle would keep the shard mapped
    # until a collection, and collections are paused or frozen around the hot paths.
    reader = _open(tmp_path, LAYOUTS["mixed"])
    reader.read(1)
    gone = weakref.ref(reader)
    gc.disable()
    try:
        del reader
        assert gone() is None
    finally:
        gc.enable()


def test_shards_of_one_layout_share_one_compiled_read(tmp_path: Path) -> None:
    # Compiling costs about 0.2 ms: a dataset of many small shards must not pay it per shard.
    columns = {"blob": "bytes", "label": "int", "weight": "float64"}
    write_dataset("mds", str(tmp_path), _samples(columns, 60), columns, size_limit=1 << 9)
    entries = load_index(tmp_path)
    assert len(entries) > 3
    before = _compiled.cache_info()
    readers = [open_shard(entry, tmp_path) for entry in entries]
    after = _compiled.cache_info()
    try:
        assert after.misses - before.misses <= 1
        assert after.hits - before.hits >= len(entries) - 1
        assert [reader.read(0)["label"] for reader in readers][:2] == [-20, 7 * readers[0].num_samples - 20]
    finally:
        for reader in readers:
            reader.close()


def test_compiled_read_takes_only_int_sizes_into_its_source() -> None:
    # Sizes are the one layout value written into the source: anything but an int is refused.
    encoding = get_encoding("bytes")
    for size in ("8); import os  #", 8.0):
        with pytest.raises(TypeError):
            compile_read(
                ["a"], [encoding], [size],  # type: ignore[list-item]
                offsets=[0, 8], view=memoryview(bytes(8)), raw=bytes(8), num_samples=1, source="test",
            )
