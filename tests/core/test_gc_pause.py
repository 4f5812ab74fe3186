import gc
import json
from collections.abc import Iterator

import pytest

from stream_plugin.format.index import parse_index
from stream_plugin.gc_pause import collection_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.enable()
    yield
    if not was_enabled:
        gc.disable()


def test_collection_paused_disables_the_collector_and_turns_it_back_on(collector_on: None) -> None:
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_collection_paused_turns_it_back_on_after_an_exception(collector_on: None) -> None:
    with pytest.raises(RuntimeError), collection_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_collection_paused_leaves_a_collector_the_caller_disabled_off(collector_on: None) -> None:
    gc.disable()
    with collection_paused():
        pass
    assert not gc.isenabled()
    with collection_paused(), collection_paused():  # nested: only the outer block turns it back on
        pass
    assert not gc.isenabled()


def test_parsing_a_large_index_runs_no_collection(collector_on: None) -> None:
    shard = {
        "column_encodings": ["int"],
        "column_names": ["id"],
        "column_sizes": [8],
        "compression": None,
        "format": "mds",
        "hashes": [],
        "raw_data": {"basename": "shard.00000.mds", "bytes": 1000, "hashes": {}},
        "samples": 10,
        "size_limit": 1 << 26,
        "version": 2,
        "zip_data": None,
    }
    shards = [{**shard, "raw_data": {**shard["raw_data"], "basename": f"shard.{i:05}.mds"}} for i in range(20_000)]
    text = json.dumps({"version": 2, "shards": shards})
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        entries = parse_index(text)
    finally:
        gc.callbacks.remove(count)
    assert len(entries) == 20_000
    # Without the pause: one young collection per 700 new objects and, every so often, a full one.
    # With it, at most the one young collection that was due when the collector came back on.
    assert len(collections) <= 1 and 2 not in collections, collections
