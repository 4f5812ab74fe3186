"""The node-local shard cache: download once per node, verify, place atomically, evict, prefetch.

Processes that share a ``local`` folder coordinate through OS file locks and atomic renames under
``local/.stream_plugin/`` only: no shared memory, no global registry, nothing to clean after a crash.
"""

from stream_plugin.cache.eviction import check_cache_limit, minimum_cache_limit
from stream_plugin.cache.prefetch import Prefetcher
from stream_plugin.cache.shard_cache import CacheConfig, ShardCache
from stream_plugin.cache.stats import CacheStats, StatsSnapshot, node_stats

__all__ = [
    "CacheConfig",
    "CacheStats",
    "Prefetcher",
    "ShardCache",
    "StatsSnapshot",
    "check_cache_limit",
    "minimum_cache_limit",
    "node_stats",
]
