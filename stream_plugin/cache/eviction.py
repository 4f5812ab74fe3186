"""Keeping a cache folder under ``cache_limit``: usage accounting, reservations, eviction.

Usage is measured, never remembered: the bytes of the known shards' files present on disk, plus the
reservations of downloads in flight (``.stream_plugin/reserved/<shard>``, holding the bytes the shard
will occupy once placed). A reservation counts only while its shard's lock is held exclusively, so one
left by a killed process stops counting the moment the kernel drops that lock.

Everything that reads or changes usage runs under the node-wide eviction lock, and a downloader
reserves its bytes before it downloads, so two concurrent downloads can never both fit in the same
free space. Eviction takes each candidate's shard lock without waiting and skips shards that are being
read (shared lock) or downloaded (exclusive lock).

Which idle shard goes first is the policy's choice. ``"lru"``: the least recently used. ``"belady"``:
the one this node reads again farthest ahead (never-again first), from the ``NodeFuture`` the cache
was given; without one it falls back to LRU. Under ``"belady"`` a download *ahead* of need (prefetch)
never evicts a shard the node reads before the shard it brings in: it waits instead (Belady's rule
applied to prefetching), so prefetching cannot push out what is about to be read.

Those decisions are ``eviction_rules``' pure functions, which ``stream-plugin simulate`` calls too: this
module gathers their facts from the folder (bytes present, locks, reservations) and carries them out.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import unquote

import numpy as np

from stream_plugin.cache.eviction_rules import Ahead, eviction_order, room_to_make, victims_to_free
from stream_plugin.cache.future import EvictionPolicy
from stream_plugin.cache.locks import ControlFolder, is_locked_exclusively, locked, try_locked
from stream_plugin.cache.stats import StatsGroup
from stream_plugin.errors import ConfigError
from stream_plugin.format.index import FileInfo, ShardEntry
from stream_plugin.redaction import get_logger

logger = get_logger(__name__)


def placed_files(entry: ShardEntry, *, keep_zip: bool) -> list[FileInfo]:
    """The files a shard occupies in the cache once placed: raw files, plus compressed ones if kept."""
    files = [raw for raw, _ in entry.file_pairs()]
    if keep_zip:
        files += [stored for _, stored in entry.file_pairs() if stored is not None]
    return files


def footprint(entry: ShardEntry, *, keep_zip: bool) -> int:
    """Bytes a shard occupies in the cache once placed."""
    return sum(info.bytes for info in placed_files(entry, keep_zip=keep_zip))


def bytes_present(local: Path, entry: ShardEntry) -> int:
    """Bytes of the shard's files (raw and compressed) that exist in ``local`` right now."""
    total = 0
    for raw, stored in entry.file_pairs():
        for info in (raw, stored):
            if info is not None:
                with suppress(FileNotFoundError):
                    total += (local / info.basename).stat().st_size
    return total


def cache_limit_floor(shard_bytes: Sequence[int], readers: int, shards_per_reader: int = 2) -> int:
    """The lowest ``cache_limit`` the loader accepts: every reader holds its largest possible set of shards.

    Each reader (rank x DataLoader worker on the node) needs the shard it reads plus the one it
    downloads next (``shards_per_reader=2``); in the worst case those are the largest shards.
    """
    if readers < 1 or shards_per_reader < 1:
        raise ConfigError(
            f"cache_limit_floor: expected readers >= 1 and shards_per_reader >= 1, found readers={readers}, "
            f"shards_per_reader={shards_per_reader}; count every rank x DataLoader worker on the node"
        )
    largest_first = sorted(shard_bytes, reverse=True)
    return sum(largest_first[: readers * shards_per_reader])


def minimum_cache_limit(shard_bytes: Sequence[int], readers: int, shards_per_reader: int = 2) -> int:
    """Deprecated: the old name of ``cache_limit_floor`` (same arguments, same value), kept until 1.0."""
    warnings.warn(
        "minimum_cache_limit is deprecated and will be removed in 1.0: call cache_limit_floor (same arguments, "
        "same value)",
        DeprecationWarning,
        stacklevel=2,
    )
    return cache_limit_floor(shard_bytes, readers, shards_per_reader)


def check_cache_limit(
    cache_limit: int | None, shard_bytes: Sequence[int], readers: int, shards_per_reader: int = 2
) -> None:
    """Raise ``ConfigError`` at start-up when ``cache_limit`` cannot hold the working set."""
    if cache_limit is None:
        return
    smallest = cache_limit_floor(shard_bytes, readers, shards_per_reader)
    if cache_limit < smallest:
        raise ConfigError(
            f"cache_limit: expected at least {smallest} bytes (the {readers * shards_per_reader} largest shards: "
            f"{readers} readers x {shards_per_reader} shards each), found {cache_limit}; raise cache_limit to "
            f"{smallest} or more, or pass cache_limit=None to keep every shard"
        )


# When each of the given shards is read next on this node (``NodeFuture.next_use`` at this process's
# clock), or None when the node's future is not known: then eviction falls back to LRU.
NextUses = Callable[[Sequence[ShardEntry]], "np.ndarray | None"]


def _unknown_future(entries: Sequence[ShardEntry]) -> np.ndarray | None:
    return None


def _always(time: int) -> bool:
    return True


class Evictor:
    """Keeps the known shards of one ``local`` folder within ``limit`` bytes, node-wide."""

    def __init__(
        self,
        local: Path,
        control: ControlFolder,
        limit: int,
        stats: StatsGroup,
        *,
        policy: EvictionPolicy = "lru",
        next_uses: NextUses = _unknown_future,
        within_reach: Callable[[int], bool] = _always,
    ) -> None:
        """``next_uses`` gives the node's future (Belady); ``within_reach(time)`` whether a download
        ahead of a shard read at ``time`` may evict (a shard read far ahead may only use free room)."""
        self._local = local
        self._control = control
        self._limit = limit
        self._stats = stats
        self._policy = policy
        self._next_uses = next_uses
        self._within_reach = within_reach

    @contextmanager
    def room_for(
        self,
        entry: ShardEntry,
        need: int,
        shards: Callable[[], Sequence[ShardEntry]],
        *,
        ahead: bool = False,
    ) -> Iterator[bool]:
        """Evict until ``need`` more bytes fit, reserve them for the ``with`` body, then drop the reservation.

        The caller holds ``entry``'s shard lock exclusively. When the only way to make room is to wait
        for other downloads in flight (or for a cached shard no reader pins, whose lock a download holds
        for a moment), this blocks on one of their shard locks (never polls) and tries again; with every
        cached shard pinned by readers and nothing in flight, the limit is too small and ``ConfigError``
        says so, except for a download ahead (``ahead``), which yields False: the shard is fetched on
        demand.

        ``ahead`` (a prefetch) under ``"belady"`` with a known future: evict only shards read after
        ``entry``; when that makes no room, reserve nothing, wait for nothing, and yield False.
        """
        name = entry.raw_data.basename
        keep_before = self._keep_before(entry) if ahead else None
        while True:
            with locked(self._control.eviction_lock):
                # We hold this shard's lock, so a reservation under its name is a dead holder's leftover.
                self._control.reservation(name).unlink(missing_ok=True)
                reserved = self._live_reservations()
                skip = set(reserved) | {name}
                if self._fit(need, shards(), skip=skip, reserved=reserved, keep_before=keep_before):
                    self._reserve(name, need)
                    break
                deferred = keep_before is not None
                # Wait for a download in flight, or for a cached shard no reader pins (its lock may be
                # held for a moment by a download that has just placed it): it can be evicted after.
                in_flight = next(iter(reserved), None) or self._unpinned(shards(), skip={name})
                if in_flight is None and not ahead:
                    raise self._too_small(name, need)
            if deferred or in_flight is None:
                # A download ahead that finds every shard pinned (a reader opens its next shard before
                # it closes its oldest) waits for nothing: the shard is fetched on demand instead.
                yield False  # fetched on demand, or tried again as the node's clock moves
                return
            with locked(self._control.shard_lock(in_flight), shared=True):
                pass  # returns once that download has placed its shard (or died)
        try:
            yield True
        finally:
            self._control.reservation(name).unlink(missing_ok=True)

    def _unpinned(self, shards: Sequence[ShardEntry], *, skip: set[str]) -> str | None:
        """A cached shard (not in ``skip``) that no reader holds open right now, if any."""
        for entry in shards:
            name = entry.raw_data.basename
            if name in skip or not bytes_present(self._local, entry):
                continue
            with try_locked(self._control.use_lock(name)) as not_read:
                if not_read:
                    return name
        return None

    def _keep_before(self, entry: ShardEntry) -> int | None:
        """Under Belady with a known future, when ``entry`` is read next: shards read by then stay."""
        if self._policy != "belady":
            return None
        uses = self._next_uses([entry])
        return None if uses is None else int(uses[0])

    def evict_to_limit(self, shards: Sequence[ShardEntry]) -> int:
        """Evict idle shards (the policy's order) until usage is within the limit; return bytes freed."""
        with locked(self._control.eviction_lock):
            reserved = self._live_reservations()
            usage = self._usage(self._bytes_present(shards), reserved)
            return self._evict(usage - self._limit, shards, skip=set(reserved))

    def evict_now(self, shards: Sequence[ShardEntry]) -> int:
        """Delete these shards' files unless a process reads or downloads them; return bytes freed."""
        with locked(self._control.eviction_lock):
            freed = 0
            for entry in self._least_recently_used(shards, set()):
                freed += self._delete_if_idle(entry)
            return freed

    def present_by_age(self, shards: Sequence[ShardEntry]) -> list[tuple[int, ShardEntry]]:
        """``(last use in ns, shard)`` of each shard with files in the cache, least recently used first."""
        return [(self._last_used(entry), entry) for entry in self._least_recently_used(shards, set())]

    def _fit(
        self,
        need: int,
        shards: Sequence[ShardEntry],
        *,
        skip: set[str],
        reserved: dict[str, int],
        keep_before: int | None = None,
    ) -> bool:
        """Whether ``need`` more bytes fit once the rule's victims are evicted (``eviction_rules``)."""
        present = self._bytes_present(shards)
        ahead = None
        if keep_before is not None:
            ahead = Ahead(
                keep_before,
                within_reach=self._within_reach(keep_before),
                missing_before=lambda: self._missing_before(shards, present, skip, keep_before),
                idle_at_least=lambda wanted: self._idle_at_least(wanted, present, skip),
            )
        excess = room_to_make(need, self._usage(present, reserved), self._limit, ahead)
        if excess is None:
            return False
        if excess <= 0:
            return True
        return self._evict(excess, shards, skip=skip, keep_before=keep_before) >= excess

    def _missing_before(
        self, shards: Sequence[ShardEntry], present: dict[str, int], skip: set[str], time: int
    ) -> bool:
        """Whether the node reads, before ``time``, a shard that is neither cached nor downloading.

        A download ahead waits for those first: downloading in the order the node needs the shards is
        what keeps prefetching from costing downloads (a later shard fetched early takes the room, or
        displaces the shard, that a nearer miss would have used, and may be evicted before it is read).
        """
        missing = [
            entry
            for entry in shards
            if not present[entry.raw_data.basename] and entry.raw_data.basename not in skip
        ]
        uses = self._next_uses(missing) if missing else None
        return uses is not None and bool((uses < time).any())

    def _idle_at_least(self, wanted: int, present: dict[str, int], skip: set[str]) -> bool:
        """Whether the cached shards no process reads or downloads (``skip`` aside) hold ``wanted`` bytes."""
        for name, size in present.items():
            if not size or name in skip:
                continue
            with (
                try_locked(self._control.shard_lock(name)) as not_downloading,
                try_locked(self._control.use_lock(name)) as not_read,
            ):
                if not_downloading and not_read:
                    wanted -= size
            if wanted <= 0:
                return True
        return False

    def _bytes_present(self, shards: Sequence[ShardEntry]) -> dict[str, int]:
        """Raw basename -> bytes of that shard's files in the folder now, for every shard."""
        return {entry.raw_data.basename: bytes_present(self._local, entry) for entry in shards}

    def _usage(self, present: dict[str, int], reserved: dict[str, int]) -> int:
        counted = dict(present)
        # A download places its files before it drops its reservation: count those bytes once.
        for name, size in reserved.items():
            counted[name] = max(counted.get(name, 0), size)
        return sum(counted.values())

    def _evict(
        self, excess: int, shards: Sequence[ShardEntry], *, skip: set[str], keep_before: int | None = None
    ) -> int:
        victims = self._victims(shards, skip, keep_before)
        sizes = [bytes_present(self._local, entry) for entry in victims]
        if not victims_to_free(excess, sizes, all_or_nothing=keep_before is not None):
            return 0  # a prefetch that cannot make room evicts nothing
        freed = 0
        for entry in victims:
            if freed >= excess:
                break
            freed += self._delete_if_idle(entry)
        return freed

    def _delete_if_idle(self, entry: ShardEntry) -> int:
        name = entry.raw_data.basename
        with (
            try_locked(self._control.shard_lock(name)) as not_downloading,
            try_locked(self._control.use_lock(name)) as not_read,
        ):
            return self._delete(entry) if not_downloading and not_read else 0

    def _victims(
        self, shards: Sequence[ShardEntry], skip: set[str], keep_before: int | None
    ) -> list[ShardEntry]:
        """The idle candidates in eviction order: the policy's first victim first.

        Under Belady: read again farthest ahead first (never-again first, least recently used first
        among equals); with ``keep_before``, only shards read after that time. Else LRU.
        """
        by_age = self._least_recently_used(shards, skip)
        uses = self._next_uses(by_age) if self._policy == "belady" and by_age else None
        return [by_age[i] for i in eviction_order(self._policy, len(by_age), uses, keep_before).tolist()]

    def _least_recently_used(self, shards: Sequence[ShardEntry], skip: set[str]) -> list[ShardEntry]:
        present = [
            entry
            for entry in shards
            if entry.raw_data.basename not in skip and bytes_present(self._local, entry) > 0
        ]
        return sorted(present, key=self._last_used)

    def _last_used(self, entry: ShardEntry) -> int:
        # Readers touch the shard's lock file; a shard placed by an older version has only its file.
        for path in (
            self._control.shard_lock(entry.raw_data.basename),
            self._local / entry.raw_data.basename,
        ):
            try:
                return path.stat().st_mtime_ns
            except FileNotFoundError:
                continue
        return 0

    def _delete(self, entry: ShardEntry) -> int:
        # The data file goes first: a shard counts as present only while all its raw files exist.
        freed = 0
        for info in [raw for raw, _ in entry.file_pairs()] + [z for _, z in entry.file_pairs() if z]:
            path = self._local / info.basename
            try:
                size = path.stat().st_size
                path.unlink()
            except FileNotFoundError:
                continue
            freed += size
        if freed:
            self._stats.record_eviction(freed)
            logger.debug(
                "evicted shard %r from %s (%d bytes) to stay within cache_limit",
                entry.raw_data.basename,
                self._local,
                freed,
            )
        return freed

    def _live_reservations(self) -> dict[str, int]:
        """Reservations whose downloader still holds its shard lock; stale ones are removed."""
        live: dict[str, int] = {}
        folder = self._control.reservations
        if not folder.is_dir():
            return live
        for path in folder.iterdir():
            name = unquote(path.name)
            if is_locked_exclusively(self._control.shard_lock(name)):
                live[name] = _read_int(path)
            else:
                path.unlink(missing_ok=True)
        return live

    def _reserve(self, name: str, need: int) -> None:
        path = self._control.reservation(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written under the eviction lock, which every reader of reservations also holds: no tear.
        path.write_text(str(need))

    def _too_small(self, name: str, need: int) -> ConfigError:
        if need > self._limit:
            found = f"the shard alone is larger than cache_limit={self._limit}"
        else:
            found = (
                f"every other cached shard of {str(self._local)!r} is being read (cache_limit={self._limit})"
            )
        return ConfigError(
            f"cache_limit: expected room for shard {name!r} ({need} bytes), found {found}; raise cache_limit "
            "to at least cache_limit_floor(shard sizes, readers) for the ranks x workers on this node"
        )


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


__all__ = [
    "Evictor",
    "bytes_present",
    "cache_limit_floor",
    "check_cache_limit",
    "eviction_order",
    "footprint",
    "minimum_cache_limit",
    "placed_files",
]
