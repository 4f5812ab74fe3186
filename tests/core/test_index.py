import json
from pathlib import Path

import pytest
from support.paths import FIXTURES_DIR

from stream_plugin.errors import IndexFormatError, UnsafePathError
from stream_plugin.format.index import check_basename, load_index, parse_index, write_index

ENTRY = {
    "column_encodings": ["int"],
    "column_names": ["x"],
    "column_sizes": [8],
    "compression": None,
    "format": "mds",
    "hashes": [],
    "raw_data": {"basename": "shard.00000.mds", "bytes": 100, "hashes": {}},
    "samples": 3,
    "size_limit": 1 << 26,
    "version": 2,
    "zip_data": None,
}


def test_every_fixture_index_parses() -> None:
    indexes = sorted(FIXTURES_DIR.glob("*/index.json"))
    assert len(indexes) >= 12
    for path in indexes:
        entries = load_index(path)
        assert entries, path
        assert all(entry.samples >= 0 for entry in entries)


def test_merged_fixture_keeps_subfolder_basenames() -> None:
    entries = load_index(FIXTURES_DIR / "mds-merged")
    assert entries[0].raw_data.basename == "0/shard.00000.mds"


def test_index_that_is_not_json_is_refused_with_the_file_name() -> None:
    with pytest.raises(
        IndexFormatError, match=r"bad/index.json: expected a JSON document, found invalid JSON"
    ):
        parse_index(b"{not json", source="bad/index.json")


def test_index_without_version_is_refused() -> None:
    with pytest.raises(IndexFormatError, match="expected index version 2, found no 'version' key"):
        parse_index(json.dumps({"shards": []}))


def test_index_with_wrong_version_is_refused() -> None:
    with pytest.raises(IndexFormatError, match="expected index version 2, found version 1"):
        parse_index(json.dumps({"shards": [], "version": 1}))


@pytest.mark.parametrize(
    "basename", ["../escape.mds", "/etc/passwd", "a/../../b.mds", "C:\\x.mds", "..\\x.mds"]
)
def test_basename_that_escapes_the_dataset_folder_is_refused(basename: str) -> None:
    entry = {**ENTRY, "raw_data": {"basename": basename, "bytes": 1, "hashes": {}}}
    with pytest.raises(UnsafePathError, match="escapes the dataset folder"):
        parse_index(json.dumps({"shards": [entry], "version": 2}))


def test_basename_in_a_subfolder_is_accepted() -> None:
    assert check_basename("3/shard.00000.mds", source="x") == "3/shard.00000.mds"


def test_shard_entry_missing_keys_names_them() -> None:
    with pytest.raises(IndexFormatError, match=r"lacks required keys \['samples'\]"):
        parse_index(json.dumps({"shards": [{"format": "mds", "raw_data": ENTRY["raw_data"]}], "version": 2}))


def test_unknown_top_level_keys_are_ignored() -> None:
    entries = parse_index(json.dumps({"shards": [ENTRY], "version": 2, "extra": {"ok": True}}))
    assert entries[0].samples == 3


def test_write_index_round_trips_with_sorted_keys(tmp_path: Path) -> None:
    path = write_index(tmp_path, [ENTRY])
    assert path.read_text() == json.dumps({"shards": [ENTRY], "version": 2}, sort_keys=True)
    assert load_index(tmp_path)[0].config == ENTRY
    assert [p.name for p in tmp_path.iterdir()] == ["index.json"]
