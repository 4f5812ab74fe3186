"""Belady with a cache readers nearly fill: a download ahead leaves room for the next download on demand,
and a shard the node starts reading within the reach of this process's clock ranks as one in use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from support.belady_cache import belady_cache, expect_reads, present_shards

from stream_plugin.cache import NodeFuture
from stream_plugin.cache.future import NEVER


def test_a_download_ahead_waits_rather_than_take_the_last_room_readers_leave(
    make_dataset, local: Path
) -> None:
    # Room for 3 shards; shards 0 and 1 are being read, shard 2 is read far ahead. A download ahead of
    # shard 3 could evict shard 2, but would leave shard 3 the only shard not being read: the next
    # download on demand would evict it before it is read.
    dataset = make_dataset(shards=5, shard_bytes=1000)
    cache = belady_cache(local, dataset, shards_fit=3)
    expect_reads(cache, dataset, {0: [0, 50], 1: [0, 50], 2: [1000], 3: [20], 4: [30]})
    with cache.reading(dataset.entries[0]), cache.reading(dataset.entries[1]):
        cache.ensure(dataset.entries[2])
        assert cache.ensure_ahead(dataset.entries[3]) is None
        assert present_shards(local, dataset) == [0, 1, 2]
        with cache.reading(dataset.entries[4]):  # on demand: evicts shard 2, read farthest ahead
            assert present_shards(local, dataset) == [0, 1, 4]


def test_a_download_ahead_still_evicts_when_room_for_a_download_on_demand_remains(
    make_dataset, local: Path
) -> None:
    dataset = make_dataset(shards=5, shard_bytes=1000)
    cache = belady_cache(local, dataset, shards_fit=3)
    expect_reads(cache, dataset, {0: [0, 50], 1: [1000], 2: [900], 3: [20]})
    with cache.reading(dataset.entries[0]):
        cache.ensure(dataset.entries[1])
        cache.ensure(dataset.entries[2])
        # Shard 1 goes for shard 3; shard 2, not being read, is left for a download on demand.
        assert cache.ensure_ahead(dataset.entries[3]) == local
        assert present_shards(local, dataset) == [0, 2, 3]


def test_a_shard_first_read_within_the_window_counts_as_in_use() -> None:
    # Shard 0 is read from 0 to 100, shard 1 from 30, shard 2 from 80; the node may be up to 40 past now.
    first = np.array([[0, 30, 80]], dtype=np.int64)
    last = np.array([[100, 60, 90]], dtype=np.int64)
    future = NodeFuture(first, last)
    shards = np.arange(3)
    assert future.next_use(shards, 0).tolist() == [0, 30, 80]
    assert future.next_use(shards, 0, 40).tolist() == [40, 40, 80]
    assert future.next_use(shards, 70, 110).tolist() == [110, NEVER, 110]


def test_a_trailing_clock_does_not_keep_a_shard_the_node_may_have_finished_over_one_it_may_have_started(
    make_dataset, local: Path
) -> None:
    # This process's clock is at 0, the node may be up to 50 past it. Shard 0 is read until 5, shard 1
    # from 30: either may be in use now, so they rank alike and the least recently used (shard 0) goes.
    # Ranked at 0 alone, shard 1 would go, and be fetched again at once if the node is already past 30.
    dataset = make_dataset(shards=4, shard_bytes=1000)
    cache = belady_cache(local, dataset, shards_fit=2)
    expect_reads(cache, dataset, {0: [0, 5], 1: [30], 3: [10]}, reach=50)
    cache.ensure(dataset.entries[0])
    cache.ensure(dataset.entries[1])
    cache.ensure(dataset.entries[3])
    assert present_shards(local, dataset) == [1, 3]
