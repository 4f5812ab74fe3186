"""``ReaderClocks``: where each reader of a node is on the node's clock, shared through the cache folder.

Belady ranks shards by when the node reads them next, so it needs the node's "now". One process knows
only its own place: with DataLoader workers, the others build other batches at the same time, some of
them behind it. Ranked from its own clock, a worker ahead would see the shards a worker behind it is
still reading as done with, evict them, and the node would fetch them again a moment later (issue 39's
small caches with 2 workers: 1.25x the optimum). So every reader of the node (each rank's main process,
or each of its workers) writes its time into its own slot of one small shared file, and eviction ranks
from the earliest reader's time (``earliest``).

The file is ``local/.stream_plugin/clocks/<readers>.bin``: per slot, the reader's time and when it wrote
it (wall clock, ns), int64 each, written with plain stores into a shared map. No lock: an aligned 8-byte
store is atomic, and each slot has one writer. A reader empties its slot when its piece of the pass ends
(``leave``). A slot not written for ``STALE_SECONDS`` (a process that died, an earlier job) is ignored.
With no live slot, ``earliest`` is None and the caller ranks from its own clock.
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from stream_plugin.cache.locks import locked
from stream_plugin.errors import ConfigError

STALE_SECONDS: Final = 600.0  # a slot this old is a process gone, not a reader waiting for its trainer
_EMPTY: Final = int(np.iinfo(np.int64).max)  # the time of a slot whose reader is not reading


@dataclass(frozen=True)
class ReaderPlace:
    """A reader among its node's: ``readers`` (ranks x workers of the node), its ``slot`` among them, and
    ``lag``, how far its clock runs behind its own reads (the node time it tells is its clock plus that)."""

    readers: int
    slot: int
    lag: int

    def __post_init__(self) -> None:
        if not 0 <= self.slot < self.readers:
            raise ConfigError(
                f"ReaderPlace: expected a slot in [0, {self.readers}), found {self.slot}; the slot is "
                "rank slot x workers + worker (node_forecast.NodeClock.reader_place)"
            )


class ReaderClocks:
    """``place``'s slot in the node's shared file under ``folder`` (see the module docstring)."""

    def __init__(self, folder: Path, place: ReaderPlace) -> None:
        self.place = place
        folder.mkdir(parents=True, exist_ok=True)
        size = place.readers * 2 * 8
        with locked(folder / f"{place.readers}.lock"):  # one process sizes the file, the others find it sized
            descriptor = os.open(folder / f"{place.readers}.bin", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(descriptor).st_size != size:
                    os.ftruncate(descriptor, size)  # zeros: every slot written at time 0, so stale
                self._map = mmap.mmap(descriptor, size)
            finally:
                os.close(descriptor)  # the map keeps the file
        self._slots = np.frombuffer(self._map, dtype=np.int64).reshape(place.readers, 2)  # (readers, [time, written])

    def publish(self, now: int) -> None:
        """This reader's reads before node time ``now`` are done."""
        self._slots[self.place.slot, 1] = time.time_ns()
        self._slots[self.place.slot, 0] = now

    def leave(self) -> None:
        """This reader stopped reading (its piece of the pass is over)."""
        self._slots[self.place.slot, 0] = _EMPTY

    def earliest(self) -> int | None:
        """The earliest live reader's time; None while no reader of the node is live."""
        slots = self._slots.copy()  # (readers, 2): one read of the shared map
        fresh = time.time_ns() - int(STALE_SECONDS * 1e9)
        live = (slots[:, 0] != _EMPTY) & (slots[:, 1] >= fresh)
        return int(slots[live, 0].min()) if live.any() else None


__all__ = ["STALE_SECONDS", "ReaderClocks", "ReaderPlace"]
