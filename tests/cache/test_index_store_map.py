"""A warm open maps the node's kept parse: its columns are read-only views of the file's pages, shared
by the node's ranks through the page cache, not a copy in each process."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from stream_plugin.cache import CacheConfig, ShardCache
from stream_plugin.cache.locks import ControlFolder
from stream_plugin.format.index import INDEX_BASENAME


def _buffer_of(array: np.ndarray) -> object:
    """The object whose memory ``array`` views."""
    base: Any = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


def test_warm_open_maps_the_kept_parse_instead_of_copying_it(make_dataset: Callable[..., Any], local: Path) -> None:
    dataset = make_dataset(shards=6)
    remote = f"file://{dataset.remote}"
    cold = ShardCache(CacheConfig(local=str(local), remote=remote)).opened_index()
    warm = ShardCache(CacheConfig(local=str(local), remote=remote)).opened_index()
    assert isinstance(_buffer_of(warm.columns.samples), mmap.mmap)
    for column in (warm.columns.samples, warm.columns.stored_bytes, warm.columns.kind_per_shard):
        assert not column.flags.writeable
    assert warm.columns.samples.tolist() == cold.columns.samples.tolist() == [e.samples for e in dataset.entries]
    assert np.array_equal(warm.columns.spans, cold.columns.spans)
    assert list(warm.entries) == dataset.entries


def test_kept_parse_replaced_while_mapped_leaves_the_open_index_intact(
    make_dataset: Callable[..., Any], local: Path
) -> None:
    """The kept parse is only ever replaced by a rename: a map keeps the file it was made from."""
    dataset = make_dataset(shards=4)
    remote = f"file://{dataset.remote}"
    ShardCache(CacheConfig(local=str(local), remote=remote)).opened_index()
    warm = ShardCache(CacheConfig(local=str(local), remote=remote)).opened_index()
    store = ControlFolder(local).index_columns(INDEX_BASENAME)
    replacement = store.with_name("replacement")
    replacement.write_bytes(b"not a binary index at all")
    replacement.replace(store)
    assert warm.columns.samples.tolist() == [entry.samples for entry in dataset.entries]
    assert list(warm.entries) == dataset.entries
