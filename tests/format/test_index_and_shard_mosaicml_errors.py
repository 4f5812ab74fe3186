"""index.json and shard errors keep MosaicML 0.13's types and key phrases, for code written against it."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from writer_rig import write_dataset

from stream_plugin.errors import IndexFormatError, IndexJSONError, UnsafeTypeError
from stream_plugin.format.index import INDEX_BASENAME, load_index
from stream_plugin.format.reader import open_shard


@pytest.mark.parametrize(("text", "pos"), [(b"", 0), (b'{"shards": [', 12), (b"\xff\xfe", 0)])
def test_an_index_that_is_not_json_is_also_a_json_decode_error_saying_empty_or_corrupted(
    text: bytes, pos: int, tmp_path: Path
) -> None:
    (tmp_path / INDEX_BASENAME).write_bytes(text)
    with pytest.raises(
        json.JSONDecodeError, match=r"Index file at .*index\.json is empty or corrupted"
    ) as caught:
        load_index(tmp_path)
    assert isinstance(caught.value, IndexFormatError) and caught.value.pos == pos


def test_the_index_json_error_survives_pickling_without_the_document() -> None:
    error = IndexJSONError("index.json: expected a JSON document, found invalid JSON", 7, 1, 8)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.pos, copy.lineno, copy.colno, copy.doc) == (
        IndexJSONError,
        str(error),
        7,
        1,
        8,
        "",
    )


def test_a_pkl_column_refused_says_the_shard_contains_an_unsafe_type(tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path), [{"obj": 1}], {"obj": "pkl"})
    (entry,) = load_index(tmp_path)
    with pytest.raises(UnsafeTypeError, match="contains an unsafe type"):
        open_shard(entry, tmp_path)


def test_the_index_json_error_hides_a_urls_password_as_every_error_does() -> None:
    error = IndexJSONError("https://user:hunter2@example.com/index.json: expected a JSON document")
    assert "hunter2" not in str(error) and "hunter2" not in error.msg
