"""Prefetch: a DataLoader worker downloads the shards of its own upcoming samples in the background.

Each worker knows the shard of every sample it will read, in order (``upcoming_shards``). While it
reads sample ``p`` it keeps the shards of samples ``p .. p + predownload - 1`` downloading in a small
thread pool, earliest first, so downloads overlap with iteration. Every download goes through
``ShardCache.ensure``, so a shard another worker or rank is already fetching is waited for, not
fetched twice.

A download ahead may wait instead (``prepare_ahead`` returns None: under Belady eviction it would have
to evict a shard the node reads sooner). The window tries such shards again, earliest first, each
time it moves; a sample that reaches one fetches it on demand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

import numpy as np

from stream_plugin.cache.shard_cache import ShardCache
from stream_plugin.errors import ConfigError
from stream_plugin.format.index import ShardEntry


class Prefetcher:
    """Keeps the shards of the next ``predownload`` samples downloading; ``wait`` hands them over.

    ``wait`` must be called from one thread (the worker's iteration loop). A download that fails in
    the background raises from the ``wait`` of the first sample that needs that shard.
    """

    def __init__(
        self,
        prepare: Callable[[int], Path],
        num_shards: int,
        upcoming_shards: np.ndarray,
        predownload: int,
        max_threads: int = 4,
        *,
        evictable: bool = True,
        more: Callable[[], np.ndarray | None] | None = None,
        prepare_ahead: Callable[[int], Path | None] | None = None,
        on_advance: Callable[[int], None] | None = None,
    ) -> None:
        """``prepare(shard_id)`` makes one shard present (``ShardCache.ensure``, or a dataset's lookup
        of the stream cache that owns a global shard id); ``num_shards`` bounds the ids.

        ``evictable=False`` (no cache_limit) remembers every shard once prepared: nothing can remove
        it, so it is never checked again.

        ``more()``, called once when the window first reaches past ``upcoming_shards``, returns the shard
        ids of the samples read after them (the next piece of a pass), or None: their downloads start
        while the last ``predownload`` samples of these are read, so a piece boundary never stalls.

        ``prepare_ahead(shard_id)`` downloads ahead of need, or returns None to wait (default: ``prepare``).
        ``on_advance(position)`` is told each position the window moves to (the cache's clock).
        """
        _check_arguments(num_shards, upcoming_shards, predownload, max_threads)
        self._prepare = prepare
        self._prepare_ahead = prepare_ahead or prepare
        self._on_advance = on_advance
        self._deferred: set[int] = set()  # shards whose download ahead waited; added from pool threads
        self._upcoming = upcoming_shards  # (samples,) shard id of each upcoming sample, in read order
        self._predownload = predownload
        self._threads = max_threads
        self._executor = ThreadPoolExecutor(
            max_workers=max_threads, thread_name_prefix="stream_plugin-prefetch"
        )
        self._futures: dict[int, Future[Path | None]] = {}
        self._last_needed: dict[int, int] = {}  # shard id -> last scheduled position that needs it
        self._position = 0
        self._scheduled_until = 0  # positions [.., _scheduled_until) have their shard scheduled
        self._evictable = evictable
        self._more = more
        self._closed = False

    @classmethod
    def for_cache(
        cls,
        cache: ShardCache,
        entries: Sequence[ShardEntry],
        upcoming_shards: np.ndarray,
        predownload: int,
        max_threads: int = 4,
    ) -> Prefetcher:
        """A prefetcher over the shards ``entries`` of one stream's ``cache``."""
        return cls(
            lambda shard: cache.ensure(entries[shard]),
            len(entries),
            upcoming_shards,
            predownload,
            max_threads,
        )

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def wait(self, position: int) -> Path:
        """Block until the shard of sample ``position`` is cached; return the cache's folder.

        Also moves the prefetch window to ``position`` (backwards too, for a restart). Read the shard
        under ``cache.reading(entry)``: that keeps it from eviction, and fetches it again if it was
        evicted since.
        """
        if self._closed:
            raise ConfigError(
                "Prefetcher.wait: expected an open prefetcher, found it closed; create a new one"
            )
        if not 0 <= position < len(self._upcoming):
            raise IndexError(
                f"Prefetcher.wait: expected a position in [0, {len(self._upcoming)}), found {position}; pass the "
                "index of the sample in this worker's upcoming_shards"
            )
        self._advance(position)
        shard = int(self._upcoming[position])
        folder = self._futures[shard].result()
        return folder if folder is not None else self._prepare(shard)

    def advance(self, position: int) -> None:
        """Move the window to ``position`` without waiting: cheap enough to call every few samples."""
        if not self._closed:
            self._advance(position)

    def close(self) -> None:
        """Cancel downloads not started yet and return at once; started ones finish in the background."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _advance(self, position: int) -> None:
        if position < self._position:  # moved backwards (a restart): schedule the window afresh
            self._scheduled_until = position
        self._position = position
        if self._on_advance is not None:
            self._on_advance(position)
        if self._deferred:
            self._retry_deferred()
        want = position + max(self._predownload, 1)
        if want > len(self._upcoming) and self._more is not None:
            more, self._more = self._more, None
            following = more()
            if following is not None and len(following):
                self._upcoming = np.concatenate([self._upcoming, np.asarray(following, np.int64)])
        end = min(len(self._upcoming), want)
        begin = max(position, self._scheduled_until)
        if begin < end:
            self._schedule(begin, end)
        self._scheduled_until = max(self._scheduled_until, end)
        if self._evictable:
            self._forget_before(position)

    def _schedule(self, begin: int, end: int) -> None:
        """Submit the shards of positions [begin, end) not yet submitted, in the order they are first
        needed (the pool starts the earliest first), and note the last position that needs each.

        The window passes over every sample of a pass once, so this is per-sample work: it is done with
        C-level dict and set operations (numpy's fixed cost per call is too much for a stride of 64).
        Once every shard in the window is submitted, no Python code runs per sample.
        """
        window = self._upcoming[begin:end].tolist()
        if self._evictable:
            self._last_needed.update(zip(window, range(begin, end)))  # later positions overwrite earlier
        in_order = dict.fromkeys(window)  # the window's shards, first-needed first
        fresh = in_order.keys() - self._futures.keys()
        if fresh:
            for shard in in_order:
                if shard in fresh:
                    self._futures[shard] = self._executor.submit(self._ahead, shard)

    def _ahead(self, shard: int) -> Path | None:
        folder = self._prepare_ahead(shard)
        if folder is None:
            self._deferred.add(shard)  # one C-level call: safe against the iteration thread's reads
        return folder

    def _retry_deferred(self) -> None:
        """Submit again the shards whose download ahead waited, as many as there are threads, in the
        order the window needs them; the rest wait for the next move."""
        deferred = self._deferred.copy()
        self._deferred.difference_update(deferred)
        waiting = {shard for shard in deferred if shard in self._futures}  # not forgotten since
        window = self._upcoming[self._position : self._scheduled_until].tolist()
        retry = list(dict.fromkeys(shard for shard in window if shard in waiting))[: self._threads]
        for shard in retry:
            self._futures[shard] = self._executor.submit(self._ahead, shard)
        self._deferred.update(waiting.difference(retry))

    def _forget_before(self, position: int) -> None:
        """Drop finished downloads no sample from ``position`` on needs: a later need re-checks the cache."""
        passed = [s for s, last in self._last_needed.items() if last < position and self._futures[s].done()]
        for shard in passed:
            del self._futures[shard], self._last_needed[shard]


def _check_arguments(
    num_shards: int, upcoming_shards: np.ndarray, predownload: int, max_threads: int
) -> None:
    if predownload < 0:
        raise ConfigError(
            f"predownload: expected a number of samples >= 0, found {predownload}; use 0 to download on demand"
        )
    if max_threads < 1:
        raise ConfigError(f"max_threads: expected >= 1, found {max_threads}")
    if upcoming_shards.ndim != 1 or not np.issubdtype(upcoming_shards.dtype, np.integer):
        raise ConfigError(
            f"upcoming_shards: expected a 1-D integer array of shard ids, found shape {upcoming_shards.shape} "
            f"dtype {upcoming_shards.dtype}"
        )
    if (
        len(upcoming_shards)
        and not 0 <= int(upcoming_shards.min()) <= int(upcoming_shards.max()) < num_shards
    ):
        raise ConfigError(
            f"upcoming_shards: expected shard ids in [0, {num_shards}), found values from "
            f"{int(upcoming_shards.min())} to {int(upcoming_shards.max())}; pass ids of the entries given"
        )
