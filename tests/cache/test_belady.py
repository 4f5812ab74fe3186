"""eviction="belady": the shard the node reads again farthest ahead goes first, and a download ahead
never evicts a shard read before the one it brings in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from support.belady_cache import belady_cache, expect_reads, present_shards

from stream_plugin.cache.eviction import eviction_order
from stream_plugin.cache.future import NEVER


def test_the_shard_read_again_farthest_ahead_is_evicted_not_the_least_recently_used(
    make_dataset, local: Path
) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = belady_cache(local, dataset)
    expect_reads(cache, dataset, {0: [10], 1: [100], 2: [2]})
    cache.ensure(dataset.entries[0])
    cache.ensure(dataset.entries[1])  # shard 0 is now the least recently used, but read sooner
    cache.advance_clock(2)
    cache.ensure(dataset.entries[2])
    assert present_shards(local, dataset) == [0, 2]


def test_a_shard_never_read_again_is_evicted_first(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = belady_cache(local, dataset)
    expect_reads(cache, dataset, {1: [50], 2: [2]})
    cache.ensure(dataset.entries[1])
    cache.ensure(dataset.entries[0])  # the most recently used, and never read again
    cache.advance_clock(2)
    cache.ensure(dataset.entries[2])
    assert present_shards(local, dataset) == [1, 2]


def test_lru_eviction_ignores_the_future(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = belady_cache(local, dataset, eviction="lru")
    expect_reads(cache, dataset, {0: [10], 1: [100], 2: [2]})
    cache.ensure(dataset.entries[0])
    cache.ensure(dataset.entries[1])
    cache.ensure(dataset.entries[2])
    assert present_shards(local, dataset) == [1, 2]


def test_without_a_future_belady_falls_back_to_least_recently_used(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = belady_cache(local, dataset)
    for index in range(3):
        cache.ensure(dataset.entries[index])
    assert present_shards(local, dataset) == [1, 2]


def test_a_download_ahead_waits_rather_than_evict_a_shard_read_sooner(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = belady_cache(local, dataset)
    expect_reads(cache, dataset, {0: [10], 1: [20], 2: [30]})
    cache.ensure(dataset.entries[0])
    cache.ensure(dataset.entries[1])
    assert cache.ensure_ahead(dataset.entries[2]) is None
    assert present_shards(local, dataset) == [0, 1]
    assert cache.ensure(dataset.entries[2]) == local  # on demand it evicts the farthest: shard 1
    assert present_shards(local, dataset) == [0, 2]


def test_a_download_ahead_evicts_a_shard_read_after_it(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = belady_cache(local, dataset)
    expect_reads(cache, dataset, {0: [10], 1: [30], 2: [20]})
    cache.ensure(dataset.entries[0])
    cache.ensure(dataset.entries[1])
    assert cache.ensure_ahead(dataset.entries[2]) == local
    assert present_shards(local, dataset) == [0, 2]


def test_a_download_ahead_waits_while_a_shard_read_before_it_is_missing(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=4, shard_bytes=1000)
    cache = belady_cache(local, dataset, shards_fit=3)
    expect_reads(cache, dataset, {0: [10], 1: [20], 2: [30]})
    cache.ensure(dataset.entries[0])
    assert cache.ensure_ahead(dataset.entries[2]) is None  # shard 1 comes first, though there is room
    assert cache.ensure_ahead(dataset.entries[1]) == local
    assert cache.ensure_ahead(dataset.entries[2]) == local
    assert present_shards(local, dataset) == [0, 1, 2]


def test_a_download_ahead_beyond_its_reach_does_not_evict(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = belady_cache(local, dataset)
    expect_reads(cache, dataset, {0: [70], 1: [500], 2: [100]}, reach=50)
    cache.ensure(dataset.entries[0])
    cache.ensure(dataset.entries[1])
    assert cache.ensure_ahead(dataset.entries[2]) is None
    cache.advance_clock(60)
    assert cache.ensure_ahead(dataset.entries[2]) == local
    assert present_shards(local, dataset) == [0, 2]


def test_a_shard_being_read_is_not_evicted_even_when_read_farthest_ahead(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = belady_cache(local, dataset)
    expect_reads(cache, dataset, {0: [1000], 1: [5], 2: [2]})
    with cache.reading(dataset.entries[0]):
        cache.ensure(dataset.entries[1])
        cache.advance_clock(2)
        cache.ensure(dataset.entries[2])
        assert present_shards(local, dataset) == [0, 2]


def test_a_download_ahead_beyond_its_reach_still_fills_free_room(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = belady_cache(local, dataset, shards_fit=3)
    expect_reads(cache, dataset, {0: [10], 1: [500]}, reach=50)
    cache.ensure(dataset.entries[0])
    assert cache.ensure_ahead(dataset.entries[1]) == local
    assert present_shards(local, dataset) == [0, 1]


def test_eviction_order_is_farthest_next_use_first_and_lru_among_equals() -> None:
    # Candidates least recently used first; next uses: 40, never, 10, never, 25.
    uses = np.array([40, NEVER, 10, NEVER, 25], dtype=np.int64)
    assert eviction_order("belady", 5, uses).tolist() == [1, 3, 0, 4, 2]
    # A download ahead of need whose shard is read at 20 evicts only shards read after it.
    assert eviction_order("belady", 5, uses, keep_before=20).tolist() == [1, 3, 0, 4]
    # LRU, or Belady without a known future: least recently used first, keep_before ignored.
    assert eviction_order("lru", 5, uses, keep_before=20).tolist() == [0, 1, 2, 3, 4]
    assert eviction_order("belady", 3, None).tolist() == [0, 1, 2]
    assert eviction_order("belady", 0, np.zeros(0, np.int64)).tolist() == []
