"""``flush_shard()`` and ``encode_sample()``: MosaicML 0.13's public writer methods."""

from __future__ import annotations

import json
from pathlib import Path

from stream_plugin.format.index import INDEX_BASENAME
from stream_plugin.format.writer import JSONWriter, MDSWriter


def _shard_samples(folder: Path) -> list[int]:
    return [shard["samples"] for shard in json.loads((folder / INDEX_BASENAME).read_text())["shards"]]


def test_flush_shard_closes_the_current_shard(tmp_path: Path) -> None:
    with MDSWriter(out=str(tmp_path), columns={"n": "int"}) as writer:
        for n in range(5):
            writer.write({"n": n})
            if n in (1, 2):
                writer.flush_shard()
    assert _shard_samples(tmp_path) == [2, 1, 2]


def test_flush_shard_writes_no_empty_shard(tmp_path: Path) -> None:
    with MDSWriter(out=str(tmp_path), columns={"n": "int"}) as writer:
        writer.flush_shard()
        writer.write({"n": 0})
        writer.flush_shard()
        writer.flush_shard()
    assert _shard_samples(tmp_path) == [1]


def test_encode_sample_returns_the_bytes_a_sample_is_stored_as(tmp_path: Path) -> None:
    writer = JSONWriter(out=str(tmp_path), columns={"word": "str", "n": "int"})
    assert writer.encode_sample({"word": "a", "n": 3}) == b'{"n": 3, "word": "a"}\n'
    writer.finish()
    assert _shard_samples(tmp_path) == []


def test_encode_sample_of_mds_is_the_sample_body(tmp_path: Path) -> None:
    writer = MDSWriter(out=str(tmp_path), columns={"n": "int", "s": "str"})
    # the variable-size column's length (uint32), then int64 n, then the string
    assert (
        writer.encode_sample({"n": 1, "s": "hi"})
        == (2).to_bytes(4, "little") + (1).to_bytes(8, "little") + b"hi"
    )
    writer.finish()
