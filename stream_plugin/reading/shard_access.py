"""Per-process access to shards: each stream's cache, and a small pool of open shard readers.

A process keeps a few readers open (memory maps are cheap; reopening per sample is not). While a reader
is open the process holds the shard's shared cache lock, so eviction never removes a shard in use.
Nothing here is pickled: DataLoader workers build their own from the dataset's plain configuration.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stream_plugin.cache import CacheConfig, CacheStats, Prefetcher, ShardCache
from stream_plugin.cache.first_shards import FirstShards
from stream_plugin.cache.future import NodeFuture
from stream_plugin.cache.reader_clocks import ReaderPlace
from stream_plugin.cache.start_stagger import StartGate
from stream_plugin.format.index import ShardEntry
from stream_plugin.format.read_options import DEFAULT_READ_OPTIONS, ReadOptions
from stream_plugin.format.reader import ShardReader, open_shard
from stream_plugin.parquet.download import ParquetShardStore
from stream_plugin.parquet.entries import ReadView
from stream_plugin.parquet.streams import shard_store
from stream_plugin.reading.shard_table import ShardTable
from stream_plugin.storage import ObjectStore

_MAX_OPEN_READERS = 16
DEFAULT_PREDOWNLOAD = 512  # samples ahead a worker downloads when predownload is None


@dataclass(frozen=True)
class StreamCacheSpec:
    """What a process needs to open one stream's cache: plain values, cheap to pickle."""

    config: CacheConfig
    remote: str | None
    store_options: tuple[tuple[str, Any], ...] = ()  # the stream's storage_options, as pairs
    parquet: ReadView | None = None  # a Parquet stream's view: its shards are byte ranges of the data

    def open_store(self) -> ObjectStore | None:
        if self.remote is None:
            return None
        from stream_plugin.storage import open_store

        return self.for_stream(open_store(self.remote, **dict(self.store_options)))

    def for_stream(self, store: ObjectStore | None) -> ObjectStore | None:
        """``store`` (the remote's) as this stream's cache downloads through it."""
        if self.parquet is None or store is None or isinstance(store, ParquetShardStore):
            return store
        return shard_store(store, self.config.local, self.parquet, dict(self.store_options))

    def open(
        self,
        stats: CacheStats,
        store: ObjectStore | None = None,
        start: StartGate | None = None,
        first: FirstShards | None = None,
    ) -> ShardCache:
        """This stream's cache; pass ``store`` to reuse one this process already opened, ``start`` to hold
        its first downloads back (``start_stagger``), ``first`` to cap the node's first-shard downloads
        (``first_shards``)."""
        return ShardCache(self.config, store if store is not None else self.open_store(), stats, start, first)


class ShardAccess:
    """Readers for global shard ids, downloading and decompressing shards on first use."""

    def __init__(
        self,
        specs: Sequence[StreamCacheSpec],
        entries: Sequence[ShardEntry],
        table: ShardTable,
        *,
        allow_unsafe_types: bool,
        read_options: ReadOptions = DEFAULT_READ_OPTIONS,
        max_open: int = _MAX_OPEN_READERS,
        stores: Sequence[ObjectStore | None] | None = None,
        start_delay: float = 0.0,
        first_shards: int | None = None,
    ) -> None:
        """``start_delay``: seconds this process holds its first shard downloads back, counted from its
        first request for a shard (``start_stagger``: ``cache.start_stagger``). ``first_shards``: at most
        this many of the node's first-shard downloads at once (``cache.first_shards``)."""
        self.stats = CacheStats()
        self._specs = specs
        reused = stores if stores is not None else [None] * len(specs)
        start = StartGate(start_delay) if start_delay > 0 else None  # one hold for every stream
        first = FirstShards(first_shards) if first_shards is not None else None  # one for every stream
        self.caches = [spec.open(self.stats, store, start, first) for spec, store in zip(specs, reused)]
        self._entries = entries
        self._table = table
        self._allow_unsafe_types = allow_unsafe_types
        self._read_options = read_options
        self.max_open = max_open
        self._open: OrderedDict[int, tuple[ShardReader, ExitStack]] = OrderedDict()
        self._stride: tuple[np.ndarray, int, Callable[[int], int]] | None = None
        self._shard_ids: dict[int, dict[str, int]] = {}  # stream -> raw basename -> global shard id

    @property
    def num_shards(self) -> int:
        return len(self._entries)

    def cache_of(self, shard_id: int) -> ShardCache:
        return self.caches[int(self._table.stream_per_shard[shard_id])]

    def entry(self, shard_id: int) -> ShardEntry:
        return self._entries[shard_id]

    def prepare(self, shard_id: int) -> Path:
        """Make the shard's raw files present locally (download / decompress once per node)."""
        return self.cache_of(shard_id).ensure(self._entries[shard_id])

    def prepare_ahead(self, shard_id: int) -> Path | None:
        """``prepare`` for a shard read later; None when its cache would rather wait (``ensure_ahead``)."""
        return self.cache_of(shard_id).ensure_ahead(self._entries[shard_id])

    @property
    def follows_future(self) -> bool:
        """Whether some stream's cache evicts by the node's future (``eviction="belady"`` with a limit)."""
        return any(cache.follows_future for cache in self.caches)

    def expect(self, future: NodeFuture | None, *, reach: int, place: ReaderPlace | None = None) -> None:
        """Give every cache that evicts by the node's future this one (global shard ids); a download
        ahead evicts only for a shard read within ``reach``; ``place``: this reader among the node's
        (``ShardCache.expect``)."""
        for stream, cache in enumerate(self.caches):
            if cache.follows_future:
                cache.expect(future, self._ids_of_stream(stream), reach=reach, place=place)

    def advance_clock(self, now: int) -> None:
        """This reader's time on the node's clock, for every cache that evicts by the future."""
        for cache in self.caches:
            cache.advance_clock(now)

    def _ids_of_stream(self, stream: int) -> dict[str, int]:
        found = self._shard_ids.get(stream)
        if found is None:
            first = int(self._table.shard_offset_per_stream[stream])
            count = int(self._table.shards_per_stream[stream])
            found = {self._entries[g].raw_data.basename: g for g in range(first, first + count)}
            self._shard_ids[stream] = found
        return found

    def reader(self, shard_id: int) -> ShardReader:
        """An open reader for the shard; past ``max_open`` one is closed (``_reader_to_close``)."""
        found = self._open.get(shard_id)
        if found is not None:
            self._open.move_to_end(shard_id)
            return found[0]
        if self._stride is not None:
            self._tell_clock_at(shard_id, *self._stride)
        stack = ExitStack()
        try:
            folder = stack.enter_context(self.cache_of(shard_id).reading(self._entries[shard_id]))
            reader = open_shard(
                self._entries[shard_id],
                folder,
                allow_unsafe_types=self._allow_unsafe_types,
                read_options=self._read_options,
            )
            stack.callback(reader.close)
        except BaseException:
            stack.close()
            raise
        self._open[shard_id] = (reader, stack)
        while len(self._open) > self.max_open:
            self._open.pop(self._reader_to_close(shard_id))[1].close()
        return reader

    def note_stride(self, shard_ids: np.ndarray, first: int, clock: Callable[[int], int]) -> None:
        """The stride being read: its shard ids, from position ``first`` of the piece, and the piece's
        clock. Opening a reader for one of them moves the node's clock to that sample, so a process that
        waits for its shard there tells the node's other readers how far it got (``reader_clocks``)."""
        self._stride = (shard_ids, first, clock)

    def _tell_clock_at(
        self, shard_id: int, shard_ids: np.ndarray, first: int, clock: Callable[[int], int]
    ) -> None:
        at = np.flatnonzero(shard_ids == shard_id)  # (k,): only when a reader opens, not per sample
        if len(at):
            self.advance_clock(clock(first + int(at[0])))

    @property
    def protected_readers(self) -> int:
        """How many of the most recently used readers are never closed to open another: every one while
        readers close least recently used first, half of ``max_open`` while they close by the node's
        future. A caller that keeps read functions of this many shards at once may rely on them."""
        if any(cache.follows_future for cache in self.caches):
            return max(1, self.max_open // 2)
        return self.max_open

    def _reader_to_close(self, opened: int) -> int:
        """The open reader to close past ``max_open``: the least recently used one, or, while the node's
        future is known, among all but the ``protected_readers`` most recently used, the one whose shard
        the node reads again farthest ahead of the opened shard's read. An open reader pins its shard:
        closing least recently used first, the pinned shards would decide eviction whatever the cache's
        policy."""
        candidates = [shard for shard in self._open if shard != opened]
        if not any(cache.follows_future for cache in self.caches):
            return candidates[0]
        candidates = candidates[: max(1, len(self._open) - self.protected_readers)]
        farthest, chosen = -1, candidates[0]
        # Ranked as the node will be when it reads the opened shard: a shard whose reads end before that
        # is done with for this pass, though this process's clock (a batch behind) still sees it in use.
        read_at = self.cache_of(opened).read_times([self._entries[opened]])
        at = None if read_at is None else int(read_at[0])
        for shard in candidates:  # (k,) with k = max_open: a few dozen at most, once per shard opened
            uses = self.cache_of(shard).next_uses([self._entries[shard]], at)
            if uses is None:
                return candidates[0]  # no future known yet: least recently used
            if int(uses[0]) > farthest:
                farthest, chosen = int(uses[0]), shard
        return chosen

    def release(self, shard_id: int) -> None:
        """Close this process's reader of the shard, if open (it pins the shard against eviction)."""
        found = self._open.pop(shard_id, None)
        if found is not None:
            found[1].close()

    @contextmanager
    def prefetch(
        self,
        shard_ids: np.ndarray,
        *,
        predownload: int | None,
        more: Callable[[], np.ndarray | None] | None = None,
        clock: Callable[[int], int] | None = None,
    ) -> Iterator[Prefetcher]:
        """Download, in background threads, the shards of the upcoming samples (``shard_ids``) in order;
        ``more`` gives the shard ids that follow them (``Prefetcher``). ``clock`` turns a position among
        them into the node's time, which the caches that evict by the future are told as it moves."""
        on_advance = None if clock is None else (lambda position: self.advance_clock(clock(position)))
        prefetcher = Prefetcher(
            self.prepare,
            len(self._entries),
            shard_ids,
            predownload=DEFAULT_PREDOWNLOAD if predownload is None else predownload,
            evictable=any(spec.config.cache_limit is not None for spec in self._specs),
            more=more,
            prepare_ahead=self.prepare_ahead,  # a download ahead never fails for want of room: it waits
            on_advance=on_advance,
        )
        try:
            yield prefetcher
        finally:
            prefetcher.close()
            if clock is not None:
                self._stride = None
                for cache in self.caches:
                    cache.leave_clock()  # the node's earliest reader is another one now

    def close(self) -> None:
        while self._open:
            _, (_, stack) = self._open.popitem()
            stack.close()
