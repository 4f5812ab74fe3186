"""An index file is scanned through a read-only map of it, not read into memory: the same columns,
digest and errors as from its bytes."""

from __future__ import annotations

import hashlib
import json
import mmap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.paths import FIXTURES_DIR

from stream_plugin.errors import IndexFormatError
from stream_plugin.format import index_native
from stream_plugin.format.index import INDEX_BASENAME, parse_index
from stream_plugin.format.index_columns import read_columns
from stream_plugin.format.index_native import native_columns

ENTRY = json.loads((FIXTURES_DIR / "mds-gz" / INDEX_BASENAME).read_text())["shards"][0]


def _entry(number: int, **changes: Any) -> dict[str, Any]:
    return {**ENTRY, "raw_data": {**ENTRY["raw_data"], "basename": f"shard.{number:05d}.mds"}, **changes}


TEXTS = {
    "plain": json.dumps({"shards": [_entry(n) for n in range(300)], "version": 2}).encode(),
    "non-ascii": json.dumps({"version": 2, "shards": [_entry(n, c=["données"]) for n in range(9)]}, ensure_ascii=False).encode(),
    "unusual-entry": json.dumps({"shards": [_entry(0, hashes=""), _entry(1)], "version": 2}).encode(),
    "invalid-utf8": json.dumps({"shards": [_entry(0, extra="x")], "version": 2}).encode().replace(b'"x"', b'"\xff"'),
    "empty-list": b'{"shards": [], "version": 2}',
}


def _mapped(path: Path) -> mmap.mmap:
    with open(path, "rb") as file:
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


@pytest.mark.parametrize("name", list(TEXTS))
def test_native_scan_of_a_map_gives_the_columns_of_the_bytes(name: str, tmp_path: Path) -> None:
    text = TEXTS[name]
    path = tmp_path / INDEX_BASENAME
    path.write_bytes(text)
    from_bytes, from_map = native_columns(text), native_columns(_mapped(path))
    assert (from_bytes is None) == (from_map is None)
    if from_bytes is not None and from_map is not None:
        for field in ("samples", "stored_bytes", "spans", "kind_per_shard", "first_of_kind"):
            assert np.array_equal(getattr(from_bytes, field), getattr(from_map, field)), field


@pytest.mark.parametrize("name", list(TEXTS))
def test_read_columns_of_a_file_gives_the_digest_and_entries_of_its_bytes(name: str, tmp_path: Path) -> None:
    text = TEXTS[name]
    path = tmp_path / INDEX_BASENAME
    path.write_bytes(text)
    try:
        expected = parse_index(text, source="idx")
    except IndexFormatError as error:
        with open(path, "rb") as file, pytest.raises(IndexFormatError) as caught:
            read_columns(file, source="idx", identity=None)
        assert str(caught.value) == str(error)
        return
    with open(path, "rb") as file:
        columns, _, digest = read_columns(file, source="idx", identity="write 1")
    assert digest == hashlib.sha256(text + b"\0write 1").hexdigest()
    assert columns.samples.tolist() == [entry.samples for entry in expected]


def test_an_empty_index_file_is_refused_as_its_bytes_are(tmp_path: Path) -> None:
    path = tmp_path / INDEX_BASENAME
    path.write_bytes(b"")
    with pytest.raises(IndexFormatError) as expected:
        parse_index(b"", source="idx")
    with open(path, "rb") as file, pytest.raises(IndexFormatError) as caught:
        read_columns(file, source="idx", identity=None)
    assert str(caught.value) == str(expected.value)


@pytest.mark.parametrize("size", [1, 7, 8, 9, 16, 23])
def test_a_map_is_ascii_unless_one_byte_has_its_high_bit_set(size: int, tmp_path: Path) -> None:
    path = tmp_path / "text"
    path.write_bytes(b"a" * size)
    assert index_native._is_ascii(_mapped(path))
    for position in range(size):
        path.write_bytes(b"a" * position + b"\x80" + b"a" * (size - position - 1))
        assert not index_native._is_ascii(_mapped(path)), position
