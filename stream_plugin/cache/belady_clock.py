"""``BeladyClock``: the node's future as this process sees it, for ``eviction="belady"``.

The loader gives the cache the node's future (``expect``: when each shard is read, in node time) and
moves this process along it (``advance``). Eviction asks it when each shard is read next, and whether
a download ahead is near enough to evict for (``within_reach``).

Where the node's readers tell one another their times (``reader_clocks``), the node's "now" is the
earliest reader's: a shard some reader of the node still reads is in use, whichever process evicts.
Otherwise it is this process's clock, which runs behind its reads by the other workers' lag, with the
reach ahead as the window the node may be in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from stream_plugin.cache.future import NEVER, NodeFuture
from stream_plugin.cache.reader_clocks import ReaderClocks
from stream_plugin.format.index import ShardEntry


class BeladyClock:
    """The node's future (None until ``expect``), this process's time on it, and the reach ahead."""

    def __init__(self) -> None:
        self._future: tuple[NodeFuture, Mapping[str, int]] | None = None
        self._now = 0
        self._reach = NEVER
        self._readers: ReaderClocks | None = None

    def expect(
        self,
        future: NodeFuture | None,
        shard_of: Mapping[str, int],
        *,
        reach: int = NEVER,
        readers: ReaderClocks | None = None,
    ) -> None:
        """Follow ``future`` from now on (``shard_of``: a shard's raw basename -> its column in it); None
        forgets it. A download ahead evicts only for a shard read within ``reach`` of now. ``readers``:
        the node's shared clocks, where this process tells its time and finds the earliest reader's."""
        self._future = None if future is None else (future, shard_of)
        self._reach = reach
        self._readers = readers

    def advance(self, now: int) -> None:
        """This process's time on the node's clock (the times of ``expect``'s future)."""
        self._now = now
        if self._readers is not None:
            self._readers.publish(now + self._readers.place.lag)

    def leave(self) -> None:
        """This process stopped reading for now: the node's earliest reader is another one."""
        if self._readers is not None:
            self._readers.leave()

    def next_uses(self, entries: Sequence[ShardEntry], at: int | None = None) -> np.ndarray | None:
        """When the node reads each shard next (node time; ``NEVER``: not in the known future); None
        while no future is known.

        Seen from the node's earliest reader (``reader_clocks``), or, where the node's readers do not
        share their times, from this process's clock, where a shard read anywhere in the window the node
        may be in counts as in use. ``at`` (a later node time, such as a shard's ``read_times``): seen from there
        instead; a shard whose reads are over by then counts by its next pass."""
        if at is None:
            earliest = None if self._readers is None else self._readers.earliest()
            if earliest is not None:
                return self._uses(entries, earliest, None)
            return self._uses(entries, self._now, self._now + self._window())
        return self._uses(entries, max(at, self._now), None)

    def read_times(self, entries: Sequence[ShardEntry]) -> np.ndarray | None:
        """When the node next reads each shard from this process's clock, without the window (its
        first read ahead, or the clock for a shard in use); None while no future is known."""
        return self._uses(entries, self._now, None)

    def _uses(self, entries: Sequence[ShardEntry], now: int, until: int | None) -> np.ndarray | None:
        known = self._future
        if known is None:
            return None
        future, shard_of = known
        columns = np.array([shard_of.get(entry.raw_data.basename, -1) for entry in entries], dtype=np.int64)
        uses = np.full(len(entries), NEVER, dtype=np.int64)  # (k,): a shard outside the future: never
        inside = columns >= 0
        uses[inside] = future.next_use(columns[inside], now, until)
        return uses

    def _window(self) -> int:
        """How far past this process's clock the node's reads may be: the reach ahead (two batches of every
        worker past the other workers' lag), or none when the reach is unbounded."""
        return 0 if self._reach >= NEVER // 2 else self._reach

    def within_reach(self, time: int) -> bool:
        """Whether a download ahead of a shard read at ``time`` may evict (it is near enough now)."""
        return time - self._now <= self._reach


__all__ = ["BeladyClock"]
