"""The native (msgspec) scan of index.json: the JSON module's columns, or None where they could differ."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.paths import FIXTURES_DIR

from stream_plugin import CSVWriter, JSONWriter, MDSWriter, merge_index
from stream_plugin.errors import IndexFormatError
from stream_plugin.format import index_native
from stream_plugin.format.index import INDEX_BASENAME, parse_index
from stream_plugin.format.index_columns import LazyEntries, _scan, parse_columns, stored_bytes
from stream_plugin.format.index_native import native_columns

GOOD = json.loads((FIXTURES_DIR / "mds-gz" / INDEX_BASENAME).read_text())
ENTRY = GOOD["shards"][0]


def _entry(number: int, **changes: Any) -> dict[str, Any]:
    raw_data = {**ENTRY["raw_data"], "basename": f"shard.{number:05d}.mds"}
    return {**ENTRY, "raw_data": raw_data, "zip_data": None, **changes}


def _index(entries: list[Any], **dumps: Any) -> bytes:
    return json.dumps({"shards": entries, "version": 2}, sort_keys=True, **dumps).encode()


def _assert_same_columns(text: bytes) -> None:
    """The native scan finds what the JSON module's scanner finds, and the entries parse_index gives."""
    native = native_columns(text)
    assert native is not None
    scanned = _scan(text, source="idx")
    assert scanned is not None
    for field in ("samples", "stored_bytes", "spans", "kind_per_shard", "first_of_kind"):
        assert np.array_equal(getattr(native, field), getattr(scanned, field)), field
    assert native.spans is not None
    entries = parse_index(text, source="idx")
    assert list(LazyEntries(text, native.spans, source="idx")) == entries
    assert native.stored_bytes.tolist() == [stored_bytes(entry) for entry in entries]


def _multi_format(root: Path) -> bytes:
    """MDS (zstd, hashed), JSON and CSV (meta files) sub-datasets merged into one index.json."""
    with MDSWriter(out=str(root / "mds"), columns={"id": "int"}, compression="zstd", hashes=["sha1"],
                   size_limit=100) as writer:
        for number in range(30):
            writer.write({"id": number})
    with JSONWriter(out=str(root / "json"), columns={"id": "int"}, compression="zstd", size_limit=100) as writer:
        for number in range(20):
            writer.write({"id": number})
    with CSVWriter(out=str(root / "csv"), columns={"id": "int"}, size_limit=100) as writer:
        for number in range(20):
            writer.write({"id": number})
    merge_index(str(root))
    return (root / INDEX_BASENAME).read_bytes()


def test_native_scan_gives_the_columns_of_writer_indexes(tmp_path: Path) -> None:
    _assert_same_columns(_multi_format(tmp_path))
    mosaicml_written = sorted(FIXTURES_DIR.glob(f"**/{INDEX_BASENAME}"))
    assert len(mosaicml_written) > 10
    for path in mosaicml_written:  # every format, compression and a merged index, as MosaicML writes them
        _assert_same_columns(path.read_bytes())


@pytest.mark.parametrize(
    "dumps",
    [{}, {"indent": 2}, {"separators": (",", ":")}, {"indent": "\t"}],
    ids=["json.dumps", "indented", "compact", "tabs"],
)
def test_native_scan_finds_entries_in_any_uniform_layout(dumps: dict[str, Any]) -> None:
    entries = [_entry(number, samples=number % 7) for number in range(300)]
    entries[5]["column_encodings"] = ["str"]  # a second kind of shard
    _assert_same_columns(_index(entries, **dumps))
    _assert_same_columns(_index([], **dumps))
    _assert_same_columns(_index(entries[:1], **dumps))


def test_native_scan_reads_the_version_first_layout_and_non_ascii_text() -> None:
    entries = [_entry(number, column_names=["données"]) for number in range(4)]
    body = json.dumps(entries, ensure_ascii=False)
    _assert_same_columns(f'{{"version": 2, "shards": {body}}}'.encode())


@pytest.mark.parametrize(
    "text",
    [
        # Values the JSON module reads and msgspec does not, or reads otherwise:
        _index([_entry(0), _entry(1, samples=10.0)]),
        _index([_entry(0, samples=10**20)]),  # past int64: parse_index refuses it against the bytes
        _index([_entry(0, extra=float("nan"))]),  # NaN in a key nobody reads
        _index([_entry(0, extra="\ud800")]),  # a lone surrogate
        _index([_entry(0), _entry(0)]),  # one file named by two entries
        # Layouts the separator check must refuse:
        _index([_entry(0), _entry(1), _entry(2)]).replace(b"}, {", b"},  {", 1),
        _index([_entry(0), _entry(1)]).replace(b'"version": 2', b'"version": 2, "version": 2'),
        b'{"shards": [], "version": 2, "shards": []}',
    ],
    ids=[
        "float-samples", "huge-samples", "nan", "lone-surrogate", "twice-named", "uneven-separators",
        "duplicate-version", "duplicate-shards",
    ],
)
def test_native_scan_leaves_what_it_cannot_vouch_for_to_the_json_module(text: bytes) -> None:
    assert native_columns(text) is None
    try:
        expected = parse_index(text, source="idx")
    except IndexFormatError as error:
        with pytest.raises(IndexFormatError) as caught:
            parse_columns(text, source="idx")
        assert str(caught.value) == str(error)
        return
    columns, _ = parse_columns(text, source="idx")
    assert columns.samples.tolist() == [entry.samples for entry in expected]


@pytest.mark.parametrize(
    "unusual",
    [
        {"hashes": ""},  # a falsy non-list: parse_index reads it as no hashes
        {"raw_data": {**ENTRY["raw_data"], "basename": "données/s.mds"}},  # a non-ASCII name
        {"raw_data": {**ENTRY["raw_data"], "basename": "a/./b.mds"}},  # a name check_basename looks into
        {"column_encodings": "int"},  # not a list: a kind of its own
    ],
    ids=["falsy-hashes", "non-ascii-name", "dot-name", "encodings-not-a-list"],
)
def test_native_scan_checks_a_chunk_with_an_unusual_entry_entry_by_entry(unusual: dict[str, Any]) -> None:
    entries = [_entry(number) for number in range(300)]
    entries[3] = _entry(3, **unusual)
    _assert_same_columns(_index(entries))


def test_native_scan_refuses_invalid_utf8_the_json_module_refuses() -> None:
    text = _index([_entry(0, extra="x")]).replace(b'"extra": "x"', b'"extra": "\xff"')
    assert native_columns(text) is None
    with pytest.raises(IndexFormatError, match="expected a JSON document, found invalid JSON"):
        parse_columns(text, source="idx")


def test_native_scan_accepts_surrogates_encoded_as_the_json_module_does() -> None:
    text = _index([_entry(0, extra="x")]).replace(b'"extra": "x"', b'"extra": "\xed\xa0\x80"')
    _assert_same_columns(text)


def test_native_scan_counts_a_compressed_meta_file_only_beside_its_raw_one(tmp_path: Path) -> None:
    meta = {"raw_meta": {"basename": "m.json", "bytes": 40}, "zip_meta": {"basename": "m.json.zstd", "bytes": 9}}
    entries = [_entry(0, format="json", **meta), _entry(1, format="json"), _entry(2, zip_meta=meta["zip_meta"])]
    _assert_same_columns(_index(entries))


@pytest.mark.parametrize("where, native", [(150, True), (3, False)], ids=["later-chunk", "first-chunk"])
def test_native_scan_leaves_an_index_unusual_from_its_first_chunk_on_to_the_json_module(
    where: int, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_native, "_CHUNK_ENTRIES", 100)  # 3 chunks
    entries = [_entry(number) for number in range(300)]
    entries[where] = _entry(where, hashes="")
    text = _index(entries)
    found = native_columns(text)
    assert (found is not None) is native
    columns, parsed = parse_columns(text, source="idx")
    assert parsed is None and columns.spans is not None
    assert np.array_equal(columns.spans, _scan(text, source="idx").spans)  # type: ignore[union-attr]
