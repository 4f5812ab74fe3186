"""Yardsticks for eviction: an ideal LRU cache and the offline optimum (Belady) on a read sequence.

Both take the shards a node reads, in order (one entry per read; repeats allowed), and a capacity in
shards (equal-size shards), and return how many reads miss, i.e. how many downloads the cache makes.
They are ideal: one reader, no prefetch, nothing pinned. Pure functions, for tests and benchmarks.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from stream_plugin.errors import ConfigError


def _checked(reads: Sequence[int] | np.ndarray, capacity: int) -> list[int]:
    if capacity < 1:
        raise ConfigError(
            f"capacity: expected at least 1 shard, found {capacity}; pass the cache size in shards"
        )
    return np.asarray(reads, dtype=np.int64).reshape(-1).tolist()


def lru_misses(reads: Sequence[int] | np.ndarray, capacity: int) -> int:
    """Downloads of a cache of ``capacity`` shards that evicts the least recently read one."""
    cached: OrderedDict[int, None] = OrderedDict()
    misses = 0
    for shard in _checked(reads, capacity):
        if shard in cached:
            cached.move_to_end(shard)
            continue
        misses += 1
        if len(cached) >= capacity:
            cached.popitem(last=False)
        cached[shard] = None
    return misses


def belady_misses(reads: Sequence[int] | np.ndarray, capacity: int) -> int:
    """Downloads of the offline optimum: on a miss, evict the cached shard read again farthest ahead
    (Belady's rule; optimal for equal-size shards)."""
    sequence = _checked(reads, capacity)
    never = len(sequence)
    following = [never] * len(sequence)  # following[i]: the next position that reads sequence[i]
    seen: dict[int, int] = {}
    for position in range(len(sequence) - 1, -1, -1):
        following[position] = seen.get(sequence[position], never)
        seen[sequence[position]] = position
    next_read: dict[int, int] = {}  # cached shard -> its next read
    farthest: list[tuple[int, int]] = []  # (-next read, shard); stale entries skipped when popped
    misses = 0
    for position, shard in enumerate(sequence):
        if shard not in next_read:
            misses += 1
            if len(next_read) >= capacity:
                while True:
                    negative, victim = heapq.heappop(farthest)
                    if next_read.get(victim) == -negative:
                        del next_read[victim]
                        break
        next_read[shard] = following[position]
        heapq.heappush(farthest, (-following[position], shard))
    return misses


__all__ = ["belady_misses", "lru_misses"]
