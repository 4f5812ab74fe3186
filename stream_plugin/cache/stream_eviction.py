"""``StreamEviction``: the hand-over from one stream's cache to the ``Evictor`` that keeps it in bounds.

Which shard goes, and when, is decided in one place: ``eviction_rules.py`` (its pure rules, which
``stream-plugin simulate`` calls too), carried out by ``eviction.py``'s ``Evictor``.
This module only builds the ``Evictor`` a stream needs (a remote and a ``cache_limit``; otherwise
nothing is ever evicted on its own), and hands it the stream's shards, their footprints and the node's
clock (``BeladyClock``, for ``"belady"``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from stream_plugin.cache.belady_clock import BeladyClock
from stream_plugin.cache.cache_config import CacheConfig
from stream_plugin.cache.eviction import Evictor, bytes_present, check_cache_limit, footprint
from stream_plugin.cache.known_shards import KnownShards
from stream_plugin.cache.locks import ControlFolder
from stream_plugin.cache.stats import StatsGroup
from stream_plugin.errors import ConfigError
from stream_plugin.format.index import ShardEntry


class StreamEviction:
    """The eviction side of one stream's cache: room for a download, and eviction on request."""

    def __init__(
        self,
        config: CacheConfig,
        control: ControlFolder,
        stats: StatsGroup,
        shards: KnownShards,
        clock: BeladyClock,
        *,
        has_remote: bool,
    ) -> None:
        self._config = config
        self._local = Path(config.local)
        self._control = control
        self._stats = stats
        self._shards = shards
        self._has_remote = has_remote
        limit = config.limit
        self._evictor = (
            Evictor(
                self._local,
                control,
                limit,
                stats,
                policy=config.eviction,
                next_uses=clock.next_uses,
                within_reach=clock.within_reach,
            )
            if limit is not None and has_remote
            else None
        )

    @property
    def limited(self) -> bool:
        """Whether shards are evicted to stay within ``cache_limit`` (a remote and a limit)."""
        return self._evictor is not None

    @property
    def follows_future(self) -> bool:
        """Whether eviction ranks shards by the node's future: a cache_limit, a remote, "belady"."""
        return self._evictor is not None and self._config.eviction == "belady"

    def room_for(self, entry: ShardEntry, *, ahead: bool) -> AbstractContextManager[bool]:
        """``Evictor.room_for`` the shard's footprint (always room without a limit)."""
        if self._evictor is None:
            return nullcontext(True)
        need = footprint(entry, keep_zip=self._config.keep_zip)
        return self._evictor.room_for(entry, need, self._shards.all, ahead=ahead)

    def check_working_set(self, readers: int, shards_per_reader: int) -> None:
        """Raise ``ConfigError`` now if ``cache_limit`` cannot hold ``readers`` x ``shards_per_reader`` shards."""
        if self._evictor is None:
            return
        sizes = [footprint(entry, keep_zip=self._config.keep_zip) for entry in self._shards.all()]
        check_cache_limit(self._config.limit, sizes, readers, shards_per_reader)

    def evict_to_limit(self) -> int:
        """Evict shards nobody reads (the policy's order) until usage fits ``cache_limit``; bytes freed."""
        if self._evictor is None:
            return 0
        return self._evictor.evict_to_limit(self._shards.all())

    def usage(self) -> int:
        """Bytes the stream's shards occupy in ``local`` now (every process's downloads count)."""
        return sum(bytes_present(self._local, entry) for entry in self._shards.all())

    def evict(self, entry: ShardEntry) -> int:
        """Delete one shard's files now unless a process reads or downloads it; return bytes freed."""
        return self._manual_evictor().evict_now([entry])

    def present_by_age(self) -> list[tuple[int, ShardEntry]]:
        """``(last use in ns, shard)`` of the stream's cached shards, least recently used first."""
        return self._manual_evictor().present_by_age(self._shards.all())

    def _manual_evictor(self) -> Evictor:
        if not self._has_remote:
            raise ConfigError(
                f"evict: expected a shard of a stream with a remote, found one of the local-only folder "
                f"{self._config.local!r}, whose files are the only copy; evict shards of remote streams only"
            )
        return self._evictor or Evictor(self._local, self._control, 0, self._stats)


__all__ = ["StreamEviction"]
