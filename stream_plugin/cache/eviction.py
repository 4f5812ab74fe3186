"""Keeping a cache folder under ``cache_limit``: usage accounting, reservations, LRU eviction.

Usage is measured, never remembered: the bytes of the known shards' files present on disk, plus the
reservations of downloads in flight (``.stream_plugin/reserved/<shard>``, holding the bytes the shard
will occupy once placed). A reservation counts only while its shard's lock is held exclusively, so one
left by a killed process stops counting the moment the kernel drops that lock.

Everything that reads or changes usage runs under the node-wide eviction lock, and a downloader
reserves its bytes before it downloads, so two concurrent downloads can never both fit in the same
free space. Eviction takes each candidate's shard lock without waiting and skips shards that are being
read (shared lock) or downloaded (exclusive lock).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import unquote

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


def minimum_cache_limit(shard_bytes: Sequence[int], readers: int, shards_per_reader: int = 2) -> int:
    """The smallest workable ``cache_limit``: every reader holds its largest possible set of shards.

    Each reader (rank x DataLoader worker on the node) needs the shard it reads plus the one it
    downloads next (``shards_per_reader=2``); in the worst case those are the largest shards.
    """
    if readers < 1 or shards_per_reader < 1:
        raise ConfigError(
            f"minimum_cache_limit: expected readers >= 1 and shards_per_reader >= 1, found readers={readers}, "
            f"shards_per_reader={shards_per_reader}; count every rank x DataLoader worker on the node"
        )
    largest_first = sorted(shard_bytes, reverse=True)
    return sum(largest_first[: readers * shards_per_reader])


def check_cache_limit(
    cache_limit: int | None, shard_bytes: Sequence[int], readers: int, shards_per_reader: int = 2
) -> None:
    """Raise ``ConfigError`` at start-up when ``cache_limit`` cannot hold the working set."""
    if cache_limit is None:
        return
    smallest = minimum_cache_limit(shard_bytes, readers, shards_per_reader)
    if cache_limit < smallest:
        raise ConfigError(
            f"cache_limit: expected at least {smallest} bytes (the {readers * shards_per_reader} largest shards: "
            f"{readers} readers x {shards_per_reader} shards each), found {cache_limit}; raise cache_limit to "
            f"{smallest} or more, or pass cache_limit=None to keep every shard"
        )


class Evictor:
    """Keeps the known shards of one ``local`` folder within ``limit`` bytes, node-wide."""

    def __init__(self, local: Path, control: ControlFolder, limit: int, stats: StatsGroup) -> None:
        self._local = local
        self._control = control
        self._limit = limit
        self._stats = stats

    @contextmanager
    def room_for(
        self, entry: ShardEntry, need: int, shards: Callable[[], Sequence[ShardEntry]]
    ) -> Iterator[None]:
        """Evict until ``need`` more bytes fit, reserve them for the ``with`` body, then drop the reservation.

        The caller holds ``entry``'s shard lock exclusively. When the only way to make room is to wait
        for other downloads in flight, this blocks on one of their shard locks (never polls) and tries
        again; with nothing in flight and no room, the limit is too small and ``ConfigError`` says so.
        """
        name = entry.raw_data.basename
        while True:
            with locked(self._control.eviction_lock):
                # We hold this shard's lock, so a reservation under its name is a dead holder's leftover.
                self._control.reservation(name).unlink(missing_ok=True)
                reserved = self._live_reservations()
                if self._fit(need, shards(), skip=set(reserved) | {name}, reserved=reserved):
                    self._reserve(name, need)
                    break
                if not reserved:
                    raise self._too_small(name, need)
                in_flight = next(iter(reserved))
            with locked(self._control.shard_lock(in_flight), shared=True):
                pass  # returns once that download has placed its shard (or died)
        try:
            yield
        finally:
            self._control.reservation(name).unlink(missing_ok=True)

    def evict_to_limit(self, shards: Sequence[ShardEntry]) -> int:
        """Evict least-recently-used idle shards until usage is within the limit; return bytes freed."""
        with locked(self._control.eviction_lock):
            reserved = self._live_reservations()
            usage = self._usage(shards, reserved)
            return self._evict(usage - self._limit, shards, skip=set(reserved))

    def evict_now(self, shards: Sequence[ShardEntry]) -> int:
        """Delete these shards' files unless a process reads or downloads them; return bytes freed."""
        with locked(self._control.eviction_lock):
            return self._evict(sum(bytes_present(self._local, entry) for entry in shards), shards, skip=set())

    def present_by_age(self, shards: Sequence[ShardEntry]) -> list[tuple[int, ShardEntry]]:
        """``(last use in ns, shard)`` of each shard with files in the cache, least recently used first."""
        return [(self._last_used(entry), entry) for entry in self._least_recently_used(shards, set())]

    def _fit(
        self, need: int, shards: Sequence[ShardEntry], *, skip: set[str], reserved: dict[str, int]
    ) -> bool:
        excess = self._usage(shards, reserved) + need - self._limit
        return excess <= 0 or self._evict(excess, shards, skip=skip) >= excess

    def _usage(self, shards: Sequence[ShardEntry], reserved: dict[str, int]) -> int:
        return sum(bytes_present(self._local, entry) for entry in shards) + sum(reserved.values())

    def _evict(self, excess: int, shards: Sequence[ShardEntry], *, skip: set[str]) -> int:
        freed = 0
        for entry in self._least_recently_used(shards, skip):
            if freed >= excess:
                break
            name = entry.raw_data.basename
            with (
                try_locked(self._control.shard_lock(name)) as not_downloading,
                try_locked(self._control.use_lock(name)) as not_read,
            ):
                if not_downloading and not_read:
                    freed += self._delete(entry)
        return freed

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
            logger.debug("evicted shard %r from %s (%d bytes) to stay within cache_limit", entry.raw_data.basename, self._local, freed)
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
            "to at least minimum_cache_limit(shard sizes, readers) for the ranks x workers on this node"
        )


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


__all__ = [
    "Evictor",
    "bytes_present",
    "check_cache_limit",
    "footprint",
    "minimum_cache_limit",
    "placed_files",
]
