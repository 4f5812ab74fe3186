"""Cache statistics: counters per process, and their sum per node read back from the control folder.

Each process mirrors its counters into its own small JSON file under ``local/.stream_plugin/stats/``
(written atomically after each download, retry or eviction: cheap next to a download). ``node_stats``
sums those files, so tests and users can check "each shard was downloaded exactly once on this node"
without any shared memory.

A live process holds an exclusive flock on ``<id>.alive`` next to its ``<id>.json``. When a process
registers, it folds the files of processes whose lock the kernel has released (they exited or died)
into ``retired.json``, so the folder stays small across many runs and totals are never lost.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO

from stream_plugin.cache.locks import ControlFolder, locked, try_locked
from stream_plugin.fileio import atomic_write_bytes

_RETIRED = "retired.json"
_LOCK = "stats.lock"
# Hits happen once per read; mirroring each one to disk would cost more than the read, so hits alone
# are mirrored at most this often (downloads, retries and evictions are mirrored at once).
_HIT_FLUSH_SECONDS = 1.0


@dataclass(frozen=True)
class StatsSnapshot:
    """Counter values at one moment; ``+`` adds two snapshots."""

    shards_downloaded: int = 0
    bytes_downloaded: int = 0
    retries: int = 0
    hits: int = 0
    shards_evicted: int = 0
    bytes_evicted: int = 0

    def __add__(self, other: StatsSnapshot) -> StatsSnapshot:
        return StatsSnapshot(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def to_dict(self) -> dict[str, int]:
        """Plain ints, for JSON."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, object]) -> StatsSnapshot:
        """Read back ``to_dict``; unknown keys (from a newer writer) are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in values.items() if k in known and isinstance(v, int)})


class CacheStats:
    """Counters of this process; mirrored to ``folder`` (a stats folder) when one is given.

    Thread-safe (prefetch threads record concurrently). After a fork the child starts from zero under
    a new identity, so parent and child never overwrite each other's file.
    """

    def __init__(self, folder: str | os.PathLike[str] | None = None) -> None:
        self._folder = Path(folder) if folder is not None else None
        self._mutex = threading.Lock()
        self._reset_identity()

    def _reset_identity(self) -> None:
        self._pid = os.getpid()
        self._id = f"{self._pid}-{secrets.token_hex(4)}"
        self._counts = StatsSnapshot()
        self._alive: IO[bytes] | None = None
        self._last_flush = 0.0

    @property
    def folder(self) -> Path | None:
        """Where the counters are mirrored, or None for process-only statistics."""
        return self._folder

    def snapshot(self) -> StatsSnapshot:
        """This process's counters now."""
        with self._mutex:
            self._follow_fork()
            return self._counts

    def record_download(self, nbytes: int) -> None:
        """One shard placed in the cache after downloading ``nbytes`` from the remote."""
        self._add(StatsSnapshot(shards_downloaded=1, bytes_downloaded=nbytes), flush=True)

    def record_retry(self) -> None:
        """One failed attempt (transient storage error or a shard that failed verification) retried."""
        self._add(StatsSnapshot(retries=1), flush=True)

    def record_hit(self) -> None:
        """One request served by a shard already in the cache."""
        self._add(StatsSnapshot(hits=1), flush=False)

    def record_eviction(self, nbytes: int) -> None:
        """One shard removed from the cache, freeing ``nbytes``."""
        self._add(StatsSnapshot(shards_evicted=1, bytes_evicted=nbytes), flush=True)

    def flush(self) -> None:
        """Mirror the counters to the stats folder now (a no-op without one)."""
        with self._mutex:
            self._follow_fork()
            self._publish()

    def _add(self, delta: StatsSnapshot, *, flush: bool) -> None:
        with self._mutex:
            self._follow_fork()
            self._counts = self._counts + delta
            if flush or time.monotonic() - self._last_flush >= _HIT_FLUSH_SECONDS:
                self._publish()

    def _follow_fork(self) -> None:
        if os.getpid() != self._pid:
            self._reset_identity()

    def _publish(self) -> None:
        if self._folder is None:
            return
        if self._alive is None:
            self._alive = _register(self._folder, self._id)
        payload = json.dumps(self._counts.to_dict(), sort_keys=True).encode()
        atomic_write_bytes(self._folder / f"{self._id}.json", payload)
        self._last_flush = time.monotonic()


class StatsGroup:
    """Records each event into several ``CacheStats``: the caller's counters and the node mirror."""

    def __init__(self, *members: CacheStats) -> None:
        self._members = members

    def record_download(self, nbytes: int) -> None:
        """See ``CacheStats.record_download``."""
        for member in self._members:
            member.record_download(nbytes)

    def record_retry(self) -> None:
        """See ``CacheStats.record_retry``."""
        for member in self._members:
            member.record_retry()

    def record_hit(self) -> None:
        """See ``CacheStats.record_hit``."""
        for member in self._members:
            member.record_hit()

    def record_eviction(self, nbytes: int) -> None:
        """See ``CacheStats.record_eviction``."""
        for member in self._members:
            member.record_eviction(nbytes)

    def flush(self) -> None:
        """See ``CacheStats.flush``."""
        for member in self._members:
            member.flush()


def _register(folder: Path, identity: str) -> IO[bytes]:
    """Lock this process's ``.alive`` file and fold the files of dead processes into ``retired.json``.

    Both happen under the stats lock, so a folder scan never mistakes a process that is still
    registering for a dead one.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / _LOCK):
        alive = open(folder / f"{identity}.alive", "ab")  # noqa: SIM115 - held for the process's life
        fcntl.flock(alive.fileno(), fcntl.LOCK_EX)
        _retire_dead(folder)
    return alive


def _retire_dead(folder: Path) -> None:
    dead = [path.name.removesuffix(".alive") for path in folder.glob("*.alive") if _is_dead(path)]
    if not dead:
        return
    totals, folded = _read_retired(folder)
    for identity in dead:
        if identity not in folded:
            totals = totals + _read_counts(folder / f"{identity}.json")
            folded.add(identity)
    # Record the fold before deleting, and keep the folded ids until their files are gone, so a crash
    # between the two steps never counts a process twice (node_stats skips folded ids).
    _write_retired(folder, totals, folded)
    for identity in dead:
        for leftover in folder.glob(f".{identity}.json.tmp-*"):  # a write cut short by the kill
            leftover.unlink(missing_ok=True)
        (folder / f"{identity}.json").unlink(missing_ok=True)
        (folder / f"{identity}.alive").unlink(missing_ok=True)
    _write_retired(folder, totals, {i for i in folded if (folder / f"{i}.alive").exists()})


def _is_dead(alive: Path) -> bool:
    with try_locked(alive) as acquired:
        return acquired


def _read_counts(path: Path) -> StatsSnapshot:
    try:
        return StatsSnapshot.from_dict(json.loads(path.read_bytes()))
    except FileNotFoundError:
        return StatsSnapshot()


def _read_retired(folder: Path) -> tuple[StatsSnapshot, set[str]]:
    try:
        document = json.loads((folder / _RETIRED).read_bytes())
    except FileNotFoundError:
        return StatsSnapshot(), set()
    return StatsSnapshot.from_dict(document["totals"]), set(document["folded"])


def _write_retired(folder: Path, totals: StatsSnapshot, folded: set[str]) -> None:
    document = {"totals": totals.to_dict(), "folded": sorted(folded)}
    atomic_write_bytes(folder / _RETIRED, json.dumps(document, sort_keys=True).encode())


def stats_folder(local: str | os.PathLike[str]) -> Path:
    """The stats folder of a cache's ``local`` folder."""
    return ControlFolder(Path(local)).stats


def node_stats(local: str | os.PathLike[str]) -> StatsSnapshot:
    """Sum of the counters of every process that ever cached into ``local`` (live and exited).

    A live process's hits may lag by up to a second; call ``CacheStats.flush`` for exact hit counts.
    """
    folder = stats_folder(local)
    if not folder.is_dir():
        return StatsSnapshot()
    with locked(folder / _LOCK, shared=True):
        totals, folded = _read_retired(folder)
        for path in folder.glob("*.json"):
            identity = path.name.removesuffix(".json")
            if path.name != _RETIRED and identity not in folded:
                totals = totals + _read_counts(path)
    return totals
