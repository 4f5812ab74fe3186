"""The yardsticks of eviction: an ideal LRU cache and the offline optimum (Belady) on a read sequence."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.simulate.ideal_caches import belady_misses, lru_misses

# The textbook page-reference string: with 3 frames LRU faults 10 times, the optimum 7 times.
TEXTBOOK = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5]


def test_lru_misses_match_the_textbook_example() -> None:
    assert lru_misses(TEXTBOOK, 3) == 10


def test_belady_misses_match_the_textbook_example() -> None:
    assert belady_misses(TEXTBOOK, 3) == 7


def test_a_cyclic_scan_larger_than_the_cache_misses_every_read_under_lru_but_not_under_belady() -> None:
    scan = np.tile(np.arange(5), 4)  # (20,)
    assert lru_misses(scan, 4) == 20
    assert belady_misses(scan, 4) == 5 + 3  # 5 cold misses, then one every 4 reads (at reads 8, 12, 16)


def test_a_cache_that_holds_every_shard_misses_each_shard_once() -> None:
    reads = np.random.default_rng(0).integers(0, 30, size=500)
    distinct = len(set(reads.tolist()))
    assert lru_misses(reads, 30) == belady_misses(reads, 30) == distinct


def test_belady_never_misses_more_than_lru_on_random_sequences() -> None:
    rng = np.random.default_rng(1)
    for capacity in (1, 3, 8):
        reads = rng.integers(0, 12, size=300)
        assert belady_misses(reads, capacity) <= lru_misses(reads, capacity)


def test_a_capacity_below_one_shard_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"capacity: expected at least 1 shard, found 0"):
        lru_misses([1, 2], 0)
