"""The columnar parse of index.json: same entries, same numbers and same errors as ``parse_index``."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.paths import FIXTURES_DIR

from stream_plugin import CSVWriter, JSONWriter, MDSWriter, merge_index
from stream_plugin.errors import IndexFormatError
from stream_plugin.format.index import INDEX_BASENAME, load_index, parse_index
from stream_plugin.format.index_columns import LazyEntries, parse_columns, stat_key_of, stored_bytes

FIXTURES = FIXTURES_DIR


def _write_multi_format(root: Path) -> Path:
    """MDS (zstd, hashed), JSON and CSV sub-datasets merged into one index.json at ``root``."""
    with MDSWriter(out=str(root / "mds"), columns={"id": "int", "text": "str"}, compression="zstd",
                   hashes=["sha1", "xxh64"], size_limit=200) as writer:
        for number in range(30):
            writer.write({"id": number, "text": f"sample {number} " * 3})
    with JSONWriter(out=str(root / "json"), columns={"id": "int", "text": "str"}, size_limit=150) as writer:
        for number in range(20):
            writer.write({"id": number, "text": f"json {number}"})
    with CSVWriter(out=str(root / "csv"), columns={"id": "int", "text": "str"}, size_limit=150) as writer:
        for number in range(20):
            writer.write({"id": number, "text": f"csv {number}"})
    merge_index(str(root))
    return root / INDEX_BASENAME


def _lazy(path: Path) -> tuple[Any, LazyEntries]:
    text = path.read_bytes()
    columns, parsed = parse_columns(text, source=str(path))
    assert parsed is None and columns.spans is not None
    return columns, LazyEntries(text, columns.spans, source=str(path))


def test_lazy_entries_equal_the_json_parsed_ones_for_a_multi_format_dataset(tmp_path: Path) -> None:
    path = _write_multi_format(tmp_path)
    expected = load_index(path)
    assert {entry.format for entry in expected} == {"mds", "json", "csv"}
    assert any(entry.zip_data is not None for entry in expected)
    columns, entries = _lazy(path)
    assert len(entries) == len(expected) > 6
    assert list(entries) == expected
    assert [entries[number] for number in range(len(expected))] == expected
    assert entries[-1] == expected[-1] and entries[1:3] == expected[1:3]
    assert columns.samples.tolist() == [entry.samples for entry in expected]
    assert columns.stored_bytes.tolist() == [stored_bytes(entry) for entry in expected]
    kinds = [(entry.format, tuple(entry.config.get("column_encodings") or ())) for entry in expected]
    assert [kinds[shard] for shard in columns.first_of_kind.tolist()] == list(dict.fromkeys(kinds))
    assert [kinds[shard] for shard in columns.first_of_kind[columns.kind_per_shard].tolist()] == kinds


@pytest.mark.parametrize("name", sorted(path.name for path in FIXTURES.iterdir() if path.is_dir()))
def test_lazy_entries_equal_the_json_parsed_ones_for_mosaicml_written_indexes(name: str) -> None:
    path = FIXTURES / name / INDEX_BASENAME
    if not path.is_file():
        pytest.skip(f"{name} holds sub-datasets only")
    _, entries = _lazy(path)
    assert list(entries) == load_index(path)


def test_lazy_entries_find_entries_in_indented_and_non_ascii_indexes(tmp_path: Path) -> None:
    document = json.loads((FIXTURES / "mds-gz" / INDEX_BASENAME).read_text())
    document["shards"][0]["raw_data"]["basename"] = "données/shard.é.mds"
    for number, text in enumerate(
        [json.dumps(document, indent=2, ensure_ascii=False), json.dumps(document, separators=(",", ":"))]
    ):
        path = tmp_path / f"{number}.json"
        path.write_text(text, encoding="utf-8")
        _, entries = _lazy(path)
        assert list(entries) == parse_index(text.encode("utf-8"), source=str(path))


def test_unusual_index_layouts_are_parsed_whole_with_the_same_result(tmp_path: Path) -> None:
    document = json.loads((FIXTURES / "mds-gz" / INDEX_BASENAME).read_text())
    texts = [
        json.dumps({"version": 2, "extra": 1, "shards": document["shards"]}),  # another key, another order
        json.dumps({"shards": document["shards"], "version": 2.0}),  # version 2 as a float
        json.dumps({"shards": document["shards"] * 2, "version": 2}),  # one file named by two entries...
    ]
    columns, parsed = parse_columns(texts[0].encode(), source="x")
    assert parsed == parse_index(texts[0], source="x") and columns.spans is None
    assert columns.samples.tolist() == [entry.samples for entry in parsed]
    columns, parsed = parse_columns(texts[1].encode(), source="x")
    assert parsed == parse_index(texts[1], source="x")
    with pytest.raises(IndexFormatError, match="already in shard 0"):  # ...is refused, as parse_index does
        parse_columns(texts[2].encode(), source="x")


def _message(call: Any) -> str:
    with pytest.raises(IndexFormatError) as caught:
        call()
    return str(caught.value)


def _bad_indexes() -> list[bytes]:
    good = json.loads((FIXTURES / "mds-gz" / INDEX_BASENAME).read_text())
    entry = good["shards"][0]

    def with_entry(**changes: Any) -> bytes:
        changed = {**entry, **changes}
        return json.dumps({"shards": [entry, changed], "version": 2}, sort_keys=True).encode()

    return [
        b"",
        b"{",
        b"[]",
        b'{"shards": [], "version": 3}',
        b'{"shards": {}, "version": 2}',
        b'{"shards": [{"format": "mds"}, }], "version": 2}',  # invalid JSON after a bad entry
        json.dumps({"shards": [entry, 5], "version": 2}).encode(),
        with_entry(format="parquet"),
        with_entry(format=["mds"]),
        with_entry(samples=-1),
        with_entry(samples=True),
        with_entry(samples=10**9),
        with_entry(raw_data={**entry["raw_data"], "basename": "../escape.mds"}),
        with_entry(raw_data={**entry["raw_data"], "basename": "/abs.mds"}),
        with_entry(raw_data={**entry["raw_data"], "bytes": -4}),
        with_entry(raw_data={**entry["raw_data"], "hashes": {"sha1": 5}}),
        with_entry(raw_data=None),
        with_entry(zip_data={"basename": "a.zstd", "bytes": "9"}),
        with_entry(hashes="sha1"),
        with_entry(compression=7),
        with_entry(),  # the same file twice
        b'{"shards": [' + b"[" * 100_000 + b"]" * 100_000 + b'], "version": 2}',
    ]


@pytest.mark.parametrize("text", _bad_indexes(), ids=lambda text: repr(text[:40]))
def test_bad_indexes_get_the_errors_parse_index_gives(text: bytes) -> None:
    expected = _message(lambda: parse_index(text, source="idx"))
    assert _message(lambda: parse_columns(text, source="idx")) == expected


def test_lazy_entries_pickle_as_a_reference_to_the_index_file(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "mds-gz", tmp_path / "data")
    path = tmp_path / "data" / INDEX_BASENAME
    columns, _ = parse_columns(path.read_bytes(), source=str(path))
    assert columns.spans is not None
    entries = LazyEntries.of_file(str(path), columns.spans, source=str(path), stat_key=stat_key_of(path.stat()))
    sent = pickle.dumps(entries)
    assert str(path).encode() in sent and path.read_bytes()[:40] not in sent  # the path, not the text
    assert list(pickle.loads(sent)) == load_index(path)
    path.write_bytes(path.read_bytes() + b" ")  # rewritten while the dataset is in use
    with pytest.raises(IndexFormatError, match="expected the index.json the dataset was opened with"):
        pickle.loads(sent)


def test_index_columns_hold_one_row_per_shard(tmp_path: Path) -> None:
    columns, _ = _lazy(_write_multi_format(tmp_path))
    assert columns.spans is not None
    assert columns.spans.shape == (columns.num_shards, 2)
    assert np.all(columns.spans[:, 0] < columns.spans[:, 1])
