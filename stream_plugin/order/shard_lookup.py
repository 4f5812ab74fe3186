"""Which shard holds each sample id, for millions of ids at a time: a bucket table, then a short walk.

``np.searchsorted`` over a million shard offsets makes about 20 dependent reads per id, most of them
cache misses once the ids are shuffled. The node's forecast locates every sample the node reads in a
pass (tens of millions at a million shards), so that search dominated it. Here the id space is cut
into power-of-two buckets, about ``BUCKETS_PER_SHARD`` per shard; a table gives the shard that holds
each bucket's first id, and an id's shard is that one or a later one: one table read, then one
offset read per shard boundary between the bucket's start and the id (none or one, mostly). Ids
still short of their shard after ``_WALK_STEPS`` steps (buckets that hold many small or empty shards)
fall back to the binary search. The result equals ``searchsorted(offsets, ids, side="right") - 1``,
empty shards skipped, for every input.
"""

from __future__ import annotations

import numpy as np

BUCKETS_PER_SHARD = 4  # table entries per shard, at most: 32 MiB of int64 at a million shards
_WALK_STEPS = 2  # offset reads per id before the fallback to the binary search
_SMALL = 1 << 12  # fewer ids than this: the binary search alone is as fast, and builds no table


class ShardLookup:
    """``shards_of(ids)``: the shard of each global sample id, given the shards' first ids.

    ``offsets`` is int64 (num_shards + 1,), non-decreasing, from 0 to the sample count (empty shards
    repeat an offset). The table is built on the first large lookup.
    """

    def __init__(self, offsets: np.ndarray) -> None:
        self._offsets = np.asarray(offsets, dtype=np.int64)  # (num_shards + 1,)
        num_shards = len(self._offsets) - 1
        num_samples = int(self._offsets[-1])
        buckets_wanted = max(1, BUCKETS_PER_SHARD * num_shards)
        # The smallest power-of-two bucket that keeps the table within BUCKETS_PER_SHARD per shard.
        self._shift = max(0, (max(1, num_samples) - 1) // buckets_wanted).bit_length()
        self._table: np.ndarray | None = None  # int64 (num_buckets,): the shard of each bucket's first id

    def __reduce__(self) -> tuple[type[ShardLookup], tuple[np.ndarray]]:
        """Pickled without its table (rebuilt on first use): a worker receives only the offsets."""
        return ShardLookup, (self._offsets,)

    def _bucket_table(self) -> np.ndarray:
        if self._table is None:
            num_buckets = (int(self._offsets[-1]) >> self._shift) + 1
            starts = np.arange(num_buckets, dtype=np.int64) << self._shift  # (num_buckets,)
            self._table = np.searchsorted(self._offsets, starts, side="right") - 1
        return self._table

    def shards_of(self, ids: np.ndarray) -> np.ndarray:
        """int64 shard ids of ``ids`` (int64, each in ``[0, num_samples)``), shaped as ``ids``."""
        offsets = self._offsets
        if ids.size < _SMALL:
            return np.searchsorted(offsets, ids, side="right") - 1
        shards = self._bucket_table()[ids >> self._shift]  # (n,): the shard of each id's bucket start
        pending = np.flatnonzero(offsets[shards + 1] <= ids)  # (k,): ids past that shard's end
        for _ in range(_WALK_STEPS):
            if not pending.size:
                return shards
            shards[pending] += 1
            pending = pending[offsets[shards[pending] + 1] <= ids[pending]]
        if pending.size:
            shards[pending] = np.searchsorted(offsets, ids[pending], side="right") - 1
        return shards


__all__ = ["BUCKETS_PER_SHARD", "ShardLookup"]
