"""``KnownShards``: every shard of the stream this process knows of, which usage and eviction count."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from stream_plugin.cache.folder_claim import ShardPathCheck
from stream_plugin.format.index import ShardEntry


class KnownShards:
    """The stream's shards by raw basename, each checked to stay inside the folder when first seen.

    Until ``set_all`` is called (the whole index), ``all`` reads the local index by itself (through
    ``read_local_index``, None while there is none), so a process that never opened the index still
    counts the shards other processes placed.
    """

    def __init__(self, check: ShardPathCheck, read_local_index: Callable[[], Sequence[ShardEntry] | None]) -> None:
        self._check = check
        self._read_local_index = read_local_index
        self._known: dict[str, ShardEntry] = {}
        self._mutex = threading.Lock()
        self._complete = False  # set_all was called: _known holds the whole stream

    def remember(self, entry: ShardEntry) -> None:
        """Know ``entry`` from now on (after checking where its files would go)."""
        name = entry.raw_data.basename
        if name in self._known:
            return
        self._check.check(entry)
        with self._mutex:
            self._known[name] = entry

    def set_all(self, entries: Sequence[ShardEntry]) -> None:
        """Every shard of the stream: usage and eviction consider exactly these."""
        for entry in entries:
            self.remember(entry)
        self._complete = True

    def all(self) -> list[ShardEntry]:
        """Every shard of the stream known now."""
        if not self._complete:
            entries = self._read_local_index()
            if entries is not None:
                self.set_all(entries)
        with self._mutex:
            return list(self._known.values())


__all__ = ["KnownShards"]
