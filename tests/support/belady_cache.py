"""A ``ShardCache`` told a hand-written node future: the Belady tests' set-up (tests/cache)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from stream_plugin.cache import CacheConfig, NodeFuture, ShardCache


def belady_cache(local: Path, dataset: Any, *, eviction: str = "belady", shards_fit: int = 2) -> ShardCache:
    """A cache of ``dataset`` (a ``make_dataset`` result) with room for ``shards_fit`` of its largest shards."""
    limit = shards_fit * max(entry.raw_data.bytes for entry in dataset.entries)
    cache = ShardCache(
        CacheConfig(local=str(local), remote=str(dataset.remote), cache_limit=limit, eviction=eviction)  # type: ignore[arg-type]
    )
    cache.open_index()
    return cache


def expect_reads(cache: ShardCache, dataset: Any, reads: dict[int, list[int]], **options: int) -> None:
    """Tell the cache the node reads shard ``s`` at the times ``reads[s]`` (one pass)."""
    times = np.array([t for times in reads.values() for t in times], dtype=np.int64)
    shards = np.array([s for s, times in reads.items() for _ in times], dtype=np.int64)
    future = NodeFuture.from_reads(len(dataset.entries), [[(times, shards)]])
    shard_of = {entry.raw_data.basename: index for index, entry in enumerate(dataset.entries)}
    cache.expect(future, shard_of, **options)


def present_shards(local: Path, dataset: Any) -> list[int]:
    """The indices of ``dataset``'s shards whose data file is in ``local``."""
    return [i for i, entry in enumerate(dataset.entries) if (local / entry.raw_data.basename).is_file()]
