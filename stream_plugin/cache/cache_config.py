"""``CacheConfig``: where and how one stream is cached, validated once on construction."""

from __future__ import annotations

import os
from dataclasses import dataclass

from stream_plugin.cache.future import EvictionPolicy, check_eviction
from stream_plugin.errors import ConfigError
from stream_plugin.format.hashing import hash_names
from stream_plugin.storage.download_settings import DEFAULT_THROTTLE_DEADLINE, DOWNLOAD_DEFAULTS
from stream_plugin.storage.retry import RetryPolicy
from stream_plugin.units import parse_bytes


@dataclass(frozen=True)
class CacheConfig:
    """Where and how one stream is cached; validated on construction.

    ``cache_limit`` (bytes, or a string such as ``"10gb"``) bounds the bytes of this ``local`` folder's
    shards; it is ignored for local-only streams (``remote=None``), which are never evicted.
    ``eviction`` picks which shard makes room (``"belady"``: the one the node reads again last, once the
    cache knows the node's future, see ``ShardCache.expect``; ``"lru"``: the least recently used).
    """

    local: str
    remote: str | None
    cache_limit: int | str | None = None
    keep_zip: bool = DOWNLOAD_DEFAULTS.keep_zip
    validate_hash: str | None = DOWNLOAD_DEFAULTS.validate_hash
    download_retry: int = DOWNLOAD_DEFAULTS.download_retry
    download_timeout: float = DOWNLOAD_DEFAULTS.download_timeout
    eviction: EvictionPolicy = "belady"
    throttle_deadline: float = DEFAULT_THROTTLE_DEADLINE  # seconds one download may be throttled

    def __post_init__(self) -> None:
        object.__setattr__(self, "local", os.fspath(self.local))
        check_eviction(self.eviction)
        if not self.local:
            raise ConfigError(
                "local: expected a folder path for the cache, found ''; pass local='/path/to/cache'"
            )
        if self.cache_limit is not None:
            limit = parse_bytes(self.cache_limit, name="cache_limit")
            if limit <= 0:
                raise ConfigError(
                    f"cache_limit: expected a size > 0 such as '10gb', found {self.cache_limit!r}; "
                    "pass None for no limit"
                )
            object.__setattr__(self, "cache_limit", limit)
        if self.validate_hash is not None and self.validate_hash not in hash_names():
            raise ConfigError(
                f"validate_hash: expected one of {hash_names()} or None, found {self.validate_hash!r}"
            )
        # RetryPolicy checks download_retry and download_timeout with its own messages.
        RetryPolicy.from_mosaic(self.download_retry, self.download_timeout, self.throttle_deadline)

    @property
    def limit(self) -> int | None:
        """``cache_limit`` in bytes (parsed on construction)."""
        assert not isinstance(self.cache_limit, str)
        return self.cache_limit


__all__ = ["CacheConfig"]
