"""Per-process access to shards: each stream's cache, and a small pool of open shard readers.

A process keeps a few readers open (memory maps are cheap; reopening per sample is not). While a reader
is open the process holds the shard's shared cache lock, so eviction never removes a shard in use.
Nothing here is pickled: DataLoader workers build their own from the dataset's plain configuration.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stream_plugin.cache import CacheConfig, CacheStats, ShardCache
from stream_plugin.format.index import ShardEntry
from stream_plugin.format.reader import ShardReader, open_shard
from stream_plugin.shard_table import ShardTable

_MAX_OPEN_READERS = 16
_DEFAULT_PREDOWNLOAD = 512
_PREFETCH_THREADS = 4


@dataclass(frozen=True)
class StreamCacheSpec:
    """What a process needs to open one stream's cache: plain values, cheap to pickle."""

    config: CacheConfig
    remote: str | None
    store_options: tuple[tuple[str, str], ...] = ()

    def open(self, stats: CacheStats) -> ShardCache:
        store = None
        if self.remote is not None:
            from stream_plugin.storage import open_store

            store = open_store(self.remote, **dict(self.store_options))
        return ShardCache(self.config, store, stats)


class ShardAccess:
    """Readers for global shard ids, downloading and decompressing shards on first use."""

    def __init__(
        self,
        specs: Sequence[StreamCacheSpec],
        entries: Sequence[ShardEntry],
        table: ShardTable,
        *,
        allow_unsafe_types: bool,
        max_open: int = _MAX_OPEN_READERS,
    ) -> None:
        self.stats = CacheStats()
        self.caches = [spec.open(self.stats) for spec in specs]
        self._entries = entries
        self._table = table
        self._allow_unsafe_types = allow_unsafe_types
        self._max_open = max_open
        self._open: OrderedDict[int, tuple[ShardReader, ExitStack]] = OrderedDict()

    def cache_of(self, shard_id: int) -> ShardCache:
        return self.caches[int(self._table.stream_per_shard[shard_id])]

    def entry(self, shard_id: int) -> ShardEntry:
        return self._entries[shard_id]

    def prepare(self, shard_id: int) -> Path:
        """Make the shard's raw files present locally (download / decompress once per node)."""
        return self.cache_of(shard_id).ensure(self._entries[shard_id])

    def reader(self, shard_id: int) -> ShardReader:
        """An open reader for the shard; the least recently used one is closed past ``max_open``."""
        found = self._open.get(shard_id)
        if found is not None:
            self._open.move_to_end(shard_id)
            return found[0]
        stack = ExitStack()
        try:
            folder = stack.enter_context(self.cache_of(shard_id).reading(self._entries[shard_id]))
            reader = open_shard(self._entries[shard_id], folder, allow_unsafe_types=self._allow_unsafe_types)
            stack.callback(reader.close)
        except BaseException:
            stack.close()
            raise
        self._open[shard_id] = (reader, stack)
        while len(self._open) > self._max_open:
            _, (_, oldest) = self._open.popitem(last=False)
            oldest.close()
        return reader

    @contextmanager
    def prefetch(
        self, sample_ids: np.ndarray, *, predownload: int | None, shard_ids: np.ndarray | None = None
    ) -> Iterator[ShardPrefetch]:
        """Download, in background threads, the shards of the upcoming ``sample_ids`` in order."""
        if shard_ids is None:
            shard_ids, _ = self._table.locate(sample_ids)
        prefetch = ShardPrefetch(self.prepare, shard_ids, window=predownload or _DEFAULT_PREDOWNLOAD)
        try:
            yield prefetch
        finally:
            prefetch.close()

    def close(self) -> None:
        while self._open:
            _, (_, stack) = self._open.popitem()
            stack.close()


class ShardPrefetch:
    """Keeps the shards of the next ``window`` samples downloading ahead of the reader.

    A scheduler thread walks the shards in order of first use and hands each to a small pool once the
    reader is within ``window`` samples of it. The reader reports progress with ``advance``; download
    errors are left for the reader's own ``prepare`` call to raise, with its retries, in its thread.
    """

    def __init__(self, prepare: Callable[[int], object], shard_ids: np.ndarray, *, window: int) -> None:
        firsts = np.unique(shard_ids, return_index=True)[1] if len(shard_ids) else np.empty(0, np.int64)
        order = np.sort(firsts)
        self._plan = list(zip(order.tolist(), shard_ids[order].tolist()))  # (first position, shard id)
        self._prepare = prepare
        self._window = window
        self._position = 0
        self._closed = False
        self._changed = threading.Condition()
        self._pool = ThreadPoolExecutor(_PREFETCH_THREADS, thread_name_prefix="stream-plugin-prefetch")
        self._scheduler = threading.Thread(target=self._schedule, name="stream-plugin-prefetch", daemon=True)
        self._scheduler.start()

    def advance(self, position: int) -> None:
        with self._changed:
            self._position = position
            self._changed.notify()

    def _schedule(self) -> None:
        for first_use, shard_id in self._plan:
            with self._changed:
                self._changed.wait_for(lambda due=first_use: self._closed or due - self._position <= self._window)
                if self._closed:
                    return
            self._pool.submit(self._quietly, shard_id)

    def _quietly(self, shard_id: int) -> None:
        if self._closed:
            return
        # A failure here is not lost: the reader's own prepare() meets it again, with retries and context.
        with suppress(Exception):
            self._prepare(shard_id)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._scheduler.join()
        self._pool.shutdown(wait=True, cancel_futures=True)
