"""The node-local shard cache: download once per node, verify, place atomically, evict, prefetch.

Processes that share a ``local`` folder coordinate through OS file locks and atomic renames under
``local/.stream_plugin/`` only: no shared memory, no global registry, nothing to clean after a crash.

On-disk layout of one ``local`` folder::

    local/index.json                       fetched once per node (ShardCache.fetch_index)
    local/shard.00000.mds                  raw shard files under their index basenames (sub-folders too)
    local/.shard.00000.mds.tmp-locked      a download in progress (or a killed one's leftover)
    local/.stream_plugin/remote            the remote this folder caches; a second remote is refused
    local/.stream_plugin/remote.lock       held while that record is created
    local/.stream_plugin/index/<name>.lock held by the one process downloading an index
    local/.stream_plugin/shards/<name>.lock  per shard: exclusive to download or evict, shared to read;
                                           its mtime is the shard's last use (LRU)
    local/.stream_plugin/evict.lock        node-wide: usage accounting, reservations, eviction
    local/.stream_plugin/reserved/<name>   bytes an in-flight download will occupy (cache_limit only)
    local/.stream_plugin/stats/            <pid>-<id>.json counters and .alive locks per process,
                                           retired.json for processes that exited

``<name>`` is the shard's raw basename percent-encoded into one file name ("3/x.mds" -> "3%2Fx.mds").
"""

from stream_plugin.cache.eviction import cache_limit_floor, check_cache_limit, minimum_cache_limit
from stream_plugin.cache.future import EVICTION_POLICIES, EvictionPolicy, NodeFuture
from stream_plugin.cache.prefetch import Prefetcher
from stream_plugin.cache.shard_cache import CacheConfig, ShardCache
from stream_plugin.cache.stats import CacheStats, StatsSnapshot, node_stats

__all__ = [
    "EVICTION_POLICIES",
    "CacheConfig",
    "CacheStats",
    "EvictionPolicy",
    "NodeFuture",
    "Prefetcher",
    "ShardCache",
    "StatsSnapshot",
    "cache_limit_floor",
    "check_cache_limit",
    "minimum_cache_limit",
    "node_stats",
]
