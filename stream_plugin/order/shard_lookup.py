"""Which shard holds each sample id, for millions of ids at a time: a bucket table, then a short walk.

``np.searchsorted`` over a million shard offsets makes about 20 dependent reads per id, most of them
cache misses once the ids are shuffled. The node's forecast locates every sample the node reads in a
pass (tens of millions at a million shards), so that search dominated it. Here the id space is cut
into power-of-two buckets, about ``BUCKETS_PER_SHARD`` per shard; a table gives the shard that holds
each bucket's first id, and an id's shard is that one or a later one. Most buckets end in that shard
or the next one: there an id's shard is the bucket's plus one where the id is past the bucket's shard's
end (one table read, one offset read and a compare per id, no branch). The ids of the other buckets
(many small or empty shards in one bucket) fall back to the binary search. The result equals
``searchsorted(offsets, ids, side="right") - 1``, empty shards skipped, for every input.
"""

from __future__ import annotations

import numpy as np

BUCKETS_PER_SHARD = 4  # table entries per shard, at most: 32 MiB of int64 at a million shards
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
        # bool (num_buckets,): buckets whose last id may lie two or more shards past their first id's
        # (None: there are none), whose ids take the binary search.
        self._crowded: np.ndarray | None = None

    def __reduce__(self) -> tuple[type[ShardLookup], tuple[np.ndarray]]:
        """Pickled without its table (rebuilt on first use): a worker receives only the offsets."""
        return ShardLookup, (self._offsets,)

    def _bucket_table(self) -> np.ndarray:
        if self._table is None:
            offsets = self._offsets
            num_samples = int(offsets[-1])
            num_buckets = (num_samples >> self._shift) + 1
            starts = np.arange(num_buckets, dtype=np.int64) << self._shift  # (num_buckets,)
            table = np.searchsorted(offsets, starts, side="right") - 1  # (num_buckets,)
            # The shard of each bucket's last id is at most that of the next bucket's first id (the
            # dataset's last id for the last bucket), so this flags every crowded bucket, and a few more.
            last_shard = int(np.searchsorted(offsets, max(num_samples - 1, 0), side="right")) - 1
            crowded = np.diff(table, append=last_shard) > 1  # (num_buckets,)
            self._crowded = crowded if crowded.any() else None
            self._table = table
        return self._table

    def shards_of(self, ids: np.ndarray) -> np.ndarray:
        """int64 shard ids of ``ids`` (int64, each in ``[0, num_samples)``), shaped as ``ids``."""
        offsets = self._offsets
        if ids.size < _SMALL:
            return np.searchsorted(offsets, ids, side="right") - 1
        ids = np.asarray(ids, dtype=np.int64)
        buckets = ids >> self._shift  # (n,)
        shards = np.take(self._bucket_table(), buckets)  # (n,): the shard of each id's bucket start
        ends = np.take(offsets[1:], shards, out=buckets)  # (n,): that shard's end (reuses ``buckets``)
        shards += ends <= ids  # the next shard for an id past it (right unless the bucket is crowded)
        if self._crowded is not None:
            pending = np.flatnonzero(self._crowded[ids >> self._shift])  # (k,): ids of crowded buckets
            shards[pending] = np.searchsorted(offsets, ids[pending], side="right") - 1
        return shards


__all__ = ["BUCKETS_PER_SHARD", "ShardLookup"]
