"""``ShardCache``: shards of one stream, downloaded once per node into its ``local`` folder.

Shards live under their index basenames, as MosaicML lays them out (``local/shard.00000.mds``). All
processes that share ``local`` coordinate through ``local/.stream_plugin/`` only (see ``locks.py``):

* A shard counts as present when every raw file it has (data, and meta for JSON/CSV) exists with the
  size ``index.json`` records; checking that takes no lock.
* Otherwise one process takes the shard's exclusive lock, downloads into temporaries, verifies size
  (and digest with ``validate_hash``), decompresses, verifies again, and renames into place; every
  other process blocks on the same lock and then finds the shard present.
* Readers hold the shard's lock shared, so eviction (which needs it exclusive) skips them.

Temporaries are named ``.<name>.tmp-locked``: only the holder of the shard lock writes them, so the
next holder can remove a killed process's leftovers without scanning the folder.
"""

from __future__ import annotations

import os
import posixpath
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stream_plugin.cache.eviction import Evictor, bytes_present, check_cache_limit, footprint
from stream_plugin.cache.future import NEVER, EvictionPolicy, NodeFuture, check_eviction
from stream_plugin.cache.index_store import OpenedIndex, open_index, store_columns
from stream_plugin.cache.locks import ControlFolder, is_control, kept_index_folder, locked, touch
from stream_plugin.cache.stats import CacheStats, StatsGroup
from stream_plugin.errors import (
    ConfigError,
    RemoteChangedError,
    ShardIntegrityError,
    StorageError,
    UnsafePathError,
)
from stream_plugin.fileio import atomic_write_bytes, publish
from stream_plugin.format.compression import decompress_file
from stream_plugin.format.hashing import hash_names, verify_digests
from stream_plugin.format.index import INDEX_BASENAME, FileInfo, ShardEntry
from stream_plugin.format.index_columns import read_columns
from stream_plugin.redaction import get_logger, redact_url
from stream_plugin.storage.base import ObjectStore, RemoteNotFoundError, store_identity
from stream_plugin.storage.download_settings import DEFAULT_THROTTLE_DEADLINE, DOWNLOAD_DEFAULTS
from stream_plugin.storage.local import local_root
from stream_plugin.storage.retry import RetryPolicy, call_with_retries
from stream_plugin.storage.throttle import NodeThrottle
from stream_plugin.units import format_bytes, parse_bytes

_log = get_logger(__name__)

# How often ``reading`` re-downloads a shard that another process evicted between the download and
# the shared lock, before deciding the cache is too small to make progress.
_READ_ATTEMPTS = 3

logger = get_logger(__name__)
# A download (all attempts) taking longer than this is logged as slow, with its size and rate.
SLOW_DOWNLOAD_SECONDS = 10.0


@dataclass(frozen=True)
class CacheConfig:
    """Where and how one stream is cached; validated on construction.

    ``cache_limit`` (bytes, or a string such as ``"10gb"``) bounds the bytes of this ``local`` folder's
    shards; it is ignored for local-only streams (``remote=None``), which are never evicted.
    ``eviction`` picks which shard makes room (``"belady"``: the one the node reads again last, once the
    cache knows the node's future, see ``ShardCache.expect``; ``"lru"``: the least recently used).
    """

    local: str
    remote: str | None
    cache_limit: int | str | None = None
    keep_zip: bool = DOWNLOAD_DEFAULTS.keep_zip
    validate_hash: str | None = DOWNLOAD_DEFAULTS.validate_hash
    download_retry: int = DOWNLOAD_DEFAULTS.download_retry
    download_timeout: float = DOWNLOAD_DEFAULTS.download_timeout
    eviction: EvictionPolicy = "belady"
    throttle_deadline: float = DEFAULT_THROTTLE_DEADLINE  # seconds one download may be throttled

    def __post_init__(self) -> None:
        object.__setattr__(self, "local", os.fspath(self.local))
        check_eviction(self.eviction)
        if not self.local:
            raise ConfigError(
                "local: expected a folder path for the cache, found ''; pass local='/path/to/cache'"
            )
        if self.cache_limit is not None:
            limit = parse_bytes(self.cache_limit, name="cache_limit")
            if limit <= 0:
                raise ConfigError(
                    f"cache_limit: expected a size > 0 such as '10gb', found {self.cache_limit!r}; "
                    "pass None for no limit"
                )
            object.__setattr__(self, "cache_limit", limit)
        if self.validate_hash is not None and self.validate_hash not in hash_names():
            raise ConfigError(
                f"validate_hash: expected one of {hash_names()} or None, found {self.validate_hash!r}"
            )
        # RetryPolicy checks download_retry and download_timeout with its own messages.
        RetryPolicy.from_mosaic(self.download_retry, self.download_timeout, self.throttle_deadline)

    @property
    def limit(self) -> int | None:
        """``cache_limit`` in bytes (parsed on construction)."""
        assert not isinstance(self.cache_limit, str)
        return self.cache_limit


@dataclass
class _Staged:
    """A shard downloaded into temporaries, waiting to be renamed into place."""

    moves: list[tuple[Path, Path]] = field(default_factory=list)  # (temporary, final), publish order
    drop_after: list[Path] = field(default_factory=list)  # compressed copies not kept
    downloaded: int = 0


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-locked")


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except FileNotFoundError:
        return False


def canonical_remote(remote: str) -> str:
    """The remote as recorded in the control folder: local paths resolved, no trailing ``/``, and no
    secret (``redact_url``: a password or a rotated token does not make it another remote)."""
    if "://" in remote and not remote.startswith("file:"):
        return redact_url(remote.rstrip("/"))
    return str(local_root(remote).resolve())


class ShardCache:
    """Downloads, verifies, places, protects and evicts the shards of one stream on this node."""

    def __init__(
        self, config: CacheConfig, store: ObjectStore | None = None, stats: CacheStats | None = None
    ) -> None:
        self._config = config
        self._local = Path(config.local)
        self._control = ControlFolder(self._local)
        self._remote = canonical_remote(config.remote) if config.remote is not None else None
        self._store = self._open_store(store)
        if self._remote is not None:
            self._claim_folder(self._remote)
        self._stats, self._record = self._statistics(stats)
        self._policy = RetryPolicy.from_mosaic(config.download_retry, config.download_timeout, config.throttle_deadline)
        # Every process of the node paces its requests to the store by one shared rate.
        self._throttle = NodeThrottle.for_node(self._control.throttle, self._remote or "")
        self._known: dict[str, ShardEntry] = {}
        self._known_mutex = threading.Lock()
        self._index_name = INDEX_BASENAME
        self._index_known = False  # set_shards was called: _known holds the whole stream
        self._safe_folders: set[str] = set()  # shard sub-folders checked to stay inside local
        self._verified: set[str] = set()  # shards whose validate_hash digest this process checked
        # The node's future (``expect``) and this process's place on its clock (``advance_clock``).
        self._future: tuple[NodeFuture, Mapping[str, int]] | None = None
        self._now = 0
        self._reach = NEVER
        limit = config.limit
        self._evictor = (
            Evictor(
                self._local,
                self._control,
                limit,
                self._record,
                policy=config.eviction,
                next_uses=self._next_uses,
                within_reach=lambda time: time - self._now <= self._reach,
            )
            if limit is not None and self._remote is not None
            else None
        )

    @property
    def config(self) -> CacheConfig:
        """The configuration this cache was made with."""
        return self._config

    @property
    def stats(self) -> CacheStats:
        """This process's counters (mirrored node-wide for streams with a remote)."""
        return self._stats

    def close(self) -> None:
        """Mirror the statistics to disk; the cache holds no other resource between calls."""
        self._record.flush()

    # -- index ------------------------------------------------------------------------------------

    def fetch_index(self, index_name: str = INDEX_BASENAME) -> Path:
        """Make ``local/index_name`` exist and return its path; one process per node downloads it.

        A cached copy is reused only while the remote's identity of the index (``ObjectStore.identity``:
        ETag and last-modified time, or a generation) equals the one recorded when it was downloaded;
        a rewritten remote raises ``RemoteChangedError`` instead of mixing old cached shards with new
        ones. An unreachable remote (or a store that gives no identity) leaves the cached copy in use.
        """
        self._index_name = index_name
        path = self._local / index_name
        if self._store is None:
            return path
        current = self._remote_identity(index_name, cached=path.is_file())
        record = self._control.index_identity(index_name)
        if path.is_file():
            self._check_unchanged(index_name, record, current)
            return path
        with locked(self._control.index_lock(index_name)):
            if not path.is_file():
                temporary = _temporary(path)
                try:
                    self._download(index_name, temporary)
                    # Refuse to publish something that is not an index; the next process would trust it.
                    # The parse is kept (index_store): no process of this node parses the index again.
                    with open(temporary, "rb") as file:
                        columns, _, digest = read_columns(
                            file, source=f"{self._remote}/{index_name}", identity=current
                        )
                    if current is not None:
                        atomic_write_bytes(record, current.encode("utf-8"))
                    else:
                        record.unlink(missing_ok=True)
                    publish(temporary, path)
                    store_columns(
                        self._control.index_columns(index_name),
                        path,
                        columns,
                        digest=digest,
                        identity=current,
                    )
                finally:
                    temporary.unlink(missing_ok=True)
            else:
                self._check_unchanged(index_name, record, current)
        return path

    def index_identity(self, index_name: str = INDEX_BASENAME) -> str | None:
        """The remote identity recorded when ``index_name`` was cached; None when the store gives none."""
        try:
            return self._control.index_identity(index_name).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def _remote_identity(self, index_name: str, *, cached: bool) -> str | None:
        """The remote's identity of the index now; None when the store gives none or, with a cached copy,
        when the remote cannot be reached (reading offline from a complete cache keeps working)."""
        store = self._store
        assert store is not None
        try:
            return call_with_retries(
                lambda: store_identity(store, index_name, timeout=self._config.download_timeout),
                self._policy,
                describe=f"identity of {index_name!r} at {self._remote}",
                throttle=self._throttle,
            )
        except RemoteNotFoundError:
            if cached:
                raise RemoteChangedError(
                    f"{self._remote}/{index_name}: expected the remote index that {self._config.local!r} "
                    "caches, found none (the remote dataset was deleted, or is being rewritten); wait for "
                    f"the writer to finish, then delete {self._config.local!r} (or use a new local folder)"
                ) from None
            raise
        except StorageError as error:
            if not cached:
                raise
            _log.warning(
                "%s/%s: could not check whether the remote index changed (%s); reading the cached copy in %s",
                self._remote,
                index_name,
                error,
                self._config.local,
            )
            return None

    def _check_unchanged(self, index_name: str, record: Path, current: str | None) -> None:
        if current is None:
            return
        try:
            recorded = record.read_text(encoding="utf-8")
        except FileNotFoundError:
            # Cached before identities were recorded (or by a store without them): adopt the current one.
            atomic_write_bytes(record, current.encode("utf-8"))
            return
        if recorded != current:
            raise RemoteChangedError(
                f"{self._remote}/{index_name}: expected the remote index {self._config.local!r} cached "
                f"({recorded}), found it rewritten ({current}); the cached shards may belong to the old "
                f"dataset. Delete {self._config.local!r} (or point local at a new folder) to read the new "
                "dataset; a state saved on the old data will be refused"
            )

    def opened_index(self, index_name: str = INDEX_BASENAME) -> OpenedIndex:
        """Fetch the index and return it validated, as columns with entries built on demand.

        One process per node parses it; the others load the parse it kept (``index_store``): in the
        cache folder of a remote stream, in this user's cache for a local-only one (whose folder is the
        user's dataset, never written to).
        """
        return self._kept_index(self.fetch_index(index_name), index_name)

    def _kept_index(self, path: Path, index_name: str) -> OpenedIndex:
        """The fetched index at ``path``, from the parse this node keeps (parsed now if there is none)."""
        control = self._control if self._remote is not None else kept_index_folder(self._config.local)
        return open_index(path, control, index_name, identity=self.index_identity(index_name))

    def open_index(self, index_name: str = INDEX_BASENAME) -> list[ShardEntry]:
        """Fetch the index, and remember its shards for eviction; return them (each built now)."""
        entries = list(self.opened_index(index_name).entries)
        self.set_shards(entries)
        return entries

    def set_shards(self, entries: Sequence[ShardEntry]) -> None:
        """Tell the cache every shard of the stream: usage and eviction consider exactly these.

        Without this call, eviction reads the local index by itself the first time it needs it.
        """
        for entry in entries:
            self._remember(entry)
        self._index_known = True

    def check_working_set(self, readers: int, shards_per_reader: int = 2) -> None:
        """Raise ``ConfigError`` now if ``cache_limit`` cannot hold ``readers`` x ``shards_per_reader`` shards."""
        if self._evictor is None:
            return
        sizes = [footprint(entry, keep_zip=self._config.keep_zip) for entry in self._stream_shards()]
        check_cache_limit(self._config.limit, sizes, readers, shards_per_reader)

    # -- the node's future (eviction="belady") ----------------------------------------------------

    @property
    def follows_future(self) -> bool:
        """Whether eviction here ranks shards by the node's future: a cache_limit, a remote, "belady"."""
        return self._evictor is not None and self._config.eviction == "belady"

    def expect(self, future: NodeFuture | None, shard_of: Mapping[str, int], *, reach: int = NEVER) -> None:
        """Evict by ``future`` from now on: ``shard_of`` maps a shard's raw basename to its column in it.

        A download ahead evicts only for a shard read within ``reach`` of now (node time): the farther
        ahead, the less the farthest shard now is the one the offline optimum would evict then. None
        forgets the future (eviction falls back to least recently used).
        """
        self._future = None if future is None else (future, shard_of)
        self._reach = reach

    def advance_clock(self, now: int) -> None:
        """This process's time on the node's clock (the times of ``expect``'s future)."""
        self._now = now

    def next_uses(self, entries: Sequence[ShardEntry]) -> np.ndarray | None:
        """When the node reads each shard next (node time; ``NEVER``: not in the known future); None
        while no future is known."""
        return self._next_uses(entries)

    def _next_uses(self, entries: Sequence[ShardEntry]) -> np.ndarray | None:
        known = self._future
        if known is None:
            return None
        future, shard_of = known
        columns = np.array([shard_of.get(entry.raw_data.basename, -1) for entry in entries], dtype=np.int64)
        uses = np.full(len(entries), NEVER, dtype=np.int64)  # (k,): a shard outside the future: never
        inside = columns >= 0
        uses[inside] = future.next_use(columns[inside], self._now)
        return uses

    # -- shards -----------------------------------------------------------------------------------

    def ensure(self, entry: ShardEntry) -> Path:
        """Block until the shard's raw files exist locally, verified; return the ``local`` folder."""
        folder = self._ensure(entry, ahead=False)
        assert folder is not None, "a download on demand always makes room (or raises)"
        return folder

    def ensure_ahead(self, entry: ShardEntry) -> Path | None:
        """``ensure`` for a shard read later (a prefetch); None when it waits instead.

        Under ``eviction="belady"`` with a known future, it downloads only if the room it needs comes
        from shards the node reads after this one: otherwise it returns None at once, and the shard is
        fetched on demand or ahead again later.
        """
        return self._ensure(entry, ahead=True)

    def _ensure(self, entry: ShardEntry, *, ahead: bool) -> Path | None:
        self._remember(entry)
        if self._is_present(entry) and self._verified_once(entry):
            self._record.record_hit()
            return self._local
        lock = self._control.shard_lock(entry.raw_data.basename)
        with locked(lock):
            if self._is_present(entry) and self._verified_once(entry, repair=True):
                self._record.record_hit()  # another process placed it while we waited
                return self._local
            self._remove_temporaries(entry)
            if self._store is None:
                self._decompress_in_place(entry)
            else:
                with self._room_for(entry, ahead=ahead) as room:
                    if not room:
                        return None
                    self._download_shard(entry)
            self._verified.add(entry.raw_data.basename)
            touch(lock)
        return self._local

    def _verified_once(self, entry: ShardEntry, *, repair: bool = False) -> bool:
        """With ``validate_hash``: check a shard already on disk once per process before its first use.

        A mismatch in a remote stream's cache is removed (``repair``, under the shard lock) and fetched
        again: returns False. A mismatch in a local-only stream raises ``ShardIntegrityError``. Only raw
        files whose index entry records the ``validate_hash`` digest can be checked.
        """
        name = entry.raw_data.basename
        if self._config.validate_hash is None or name in self._verified:
            return True
        try:
            for raw, _ in entry.file_pairs():
                self._verify(raw, self._local / raw.basename, required=False)
        except ShardIntegrityError as error:
            if self._store is None:
                raise ShardIntegrityError(
                    f"{error}. The local-only stream {self._config.local!r} holds a corrupt copy: re-write or "
                    "restore the shard"
                ) from error
            if repair:
                for raw, _ in entry.file_pairs():
                    (self._local / raw.basename).unlink(missing_ok=True)
            return False
        except FileNotFoundError:
            # Another process evicted it since it was seen (cache_limit): not here, so fetch it again.
            return False
        self._verified.add(name)
        return True

    @contextmanager
    def reading(self, entry: ShardEntry) -> Iterator[Path]:
        """``ensure`` the shard and keep it from eviction (shared in-use lock) while the body reads it."""
        if self._store is None or self._evictor is None:
            # Local-only, or no cache_limit: nothing ever removes these files, so no lock is needed
            # (an open reader then costs a memory map and no file descriptor).
            yield self.ensure(entry)
            return
        name = entry.raw_data.basename
        for _ in range(_READ_ATTEMPTS):
            # The in-use lock comes first: a shard downloaded on demand is pinned from the moment it is
            # placed, so no download ahead (of this process or another) evicts it before it is read.
            with locked(self._control.use_lock(name), shared=True):
                folder = self.ensure(entry)
                if self._is_present(entry):
                    touch(self._control.shard_lock(name))
                    yield folder
                    return
        raise ConfigError(
            f"cache_limit: expected shard {entry.raw_data.basename!r} to stay cached until read, found it "
            f"evicted {_READ_ATTEMPTS} times in a row; raise cache_limit (see cache_limit_floor) or use "
            "fewer readers per node"
        )

    def evict_to_limit(self) -> int:
        """Evict shards nobody reads (the policy's order) until usage fits ``cache_limit``; bytes freed."""
        if self._evictor is None:
            return 0
        return self._evictor.evict_to_limit(self._stream_shards())

    def usage(self) -> int:
        """Bytes the stream's shards occupy in ``local`` now (every process's downloads count)."""
        return sum(bytes_present(self._local, entry) for entry in self._stream_shards())

    def evict(self, entry: ShardEntry) -> int:
        """Delete one shard's files now unless a process reads or downloads it; return bytes freed.

        A stream with no remote is never evicted: its files are the only copy.
        """
        return self._manual_evictor().evict_now([entry])

    def present_by_age(self) -> list[tuple[int, ShardEntry]]:
        """``(last use in ns, shard)`` of the stream's cached shards, least recently used first."""
        return self._manual_evictor().present_by_age(self._stream_shards())

    def _manual_evictor(self) -> Evictor:
        if self._remote is None:
            raise ConfigError(
                f"evict: expected a shard of a stream with a remote, found one of the local-only folder "
                f"{self._config.local!r}, whose files are the only copy; evict shards of remote streams only"
            )
        return self._evictor or Evictor(self._local, self._control, 0, self._record)

    # -- internals --------------------------------------------------------------------------------

    def _open_store(self, store: ObjectStore | None) -> ObjectStore | None:
        if self._remote is None:
            if store is not None:
                raise ConfigError(
                    "store: expected None for a local-only stream (remote=None), found a store; pass the "
                    "store's URL as remote, or drop the store"
                )
            return None
        if self._remote == str(self._local.resolve()):
            raise ConfigError(
                f"remote: expected a location other than local={self._config.local!r}, found the same folder; "
                "pass remote=None to read a local dataset in place"
            )
        if store is None:
            from stream_plugin.storage import open_store  # the registry of backends lives there

            assert self._config.remote is not None
            return open_store(self._config.remote)
        return store

    def _statistics(self, stats: CacheStats | None) -> tuple[CacheStats, StatsGroup]:
        """The caller's counters (or new ones), plus a mirror into this folder's node statistics.

        The mirror is always there for a remote stream, so ``node_stats(local)`` counts every process
        even when the caller shares one process-only ``CacheStats`` across streams.
        """
        node_folder = self._control.stats if self._remote is not None else None
        counters = stats if stats is not None else CacheStats(node_folder)
        if node_folder is None or counters.folder == node_folder:
            return counters, StatsGroup(counters)
        return counters, StatsGroup(counters, CacheStats(node_folder))

    def _claim_folder(self, remote: str) -> None:
        """Record which remote ``local`` caches; refuse a second one (their shard names collide)."""
        record = self._control.remote_record
        if not record.is_file():
            with locked(self._control.remote_lock):
                if not record.is_file():
                    atomic_write_bytes(record, remote.encode("utf-8"))
        recorded = record.read_text(encoding="utf-8")
        if recorded != remote:
            raise ConfigError(
                f"local: expected {self._config.local!r} to cache remote {remote!r}, found it already caches "
                f"{recorded!r} (recorded in {record}); two remotes cannot share one local folder because their "
                "shard names collide. Use a different local folder (or split) for each remote"
            )

    def _remember(self, entry: ShardEntry) -> None:
        name = entry.raw_data.basename
        if name in self._known:
            return
        for raw, stored in entry.file_pairs():
            for info in (raw, stored):
                if info is not None and is_control(info.basename):
                    raise UnsafePathError(
                        f"index.json: expected shard basenames outside the cache's control folder, found "
                        f"{info.basename!r}; rename the shard (regenerate the index)"
                    )
        if self._remote is not None:
            self._refuse_links_out(entry)
        with self._known_mutex:
            self._known[name] = entry

    def _refuse_links_out(self, entry: ShardEntry) -> None:
        """Refuse a cache whose sub-folder of a shard is a symlink leading out of ``local``: downloads
        would write, and eviction delete, files elsewhere. (A file that is itself a link is replaced by
        the atomic rename of a download, never written through.)"""
        for raw, stored in entry.file_pairs():
            for info in (raw, stored):
                if info is None:
                    continue
                folder = posixpath.dirname(info.basename)
                if not folder or folder in self._safe_folders:
                    continue
                root = self._local.resolve()
                resolved = (self._local / folder).resolve()
                if not resolved.is_relative_to(root):
                    raise UnsafePathError(
                        f"{self._local / folder}: expected a sub-folder inside the cache folder {str(root)!r}, "
                        f"found it leads to {str(resolved)!r} through a symlink; remove the symlink (the cache "
                        "does not follow links out of its folder) or choose another local folder"
                    )
                self._safe_folders.add(folder)

    def _stream_shards(self) -> list[ShardEntry]:
        """Every shard of the stream, so usage counts shards other processes placed too."""
        if not self._index_known:
            index = self._local / self._index_name
            if index.is_file():  # fetch_index put it there; a process that never opened it reads it now
                self.set_shards(self._kept_index(index, self._index_name).entries)
        with self._known_mutex:
            return list(self._known.values())

    def _is_present(self, entry: ShardEntry) -> bool:
        return all(_has_size(self._local / raw.basename, raw.bytes) for raw, _ in entry.file_pairs())

    def _room_for(self, entry: ShardEntry, *, ahead: bool) -> AbstractContextManager[bool]:
        if self._evictor is None:
            return nullcontext(True)
        need = footprint(entry, keep_zip=self._config.keep_zip)
        return self._evictor.room_for(entry, need, self._stream_shards, ahead=ahead)

    def _remove_temporaries(self, entry: ShardEntry) -> None:
        # We hold the shard lock, so any temporary of this shard belongs to a holder that died.
        for raw, stored in entry.file_pairs():
            for info in (raw, stored):
                if info is not None:
                    _temporary(self._local / info.basename).unlink(missing_ok=True)

    def _download(self, key: str, dest: Path) -> int:
        dest.parent.mkdir(parents=True, exist_ok=True)
        store = self._store
        assert store is not None
        started = time.monotonic()
        size = call_with_retries(
            lambda: store.download(key, dest, timeout=self._config.download_timeout),
            self._policy,
            describe=f"download of {key!r} from {self._remote}",
            on_retry=lambda _attempt, _error: self._record.record_retry(),
            throttle=self._throttle,
        )
        elapsed = time.monotonic() - started
        rate = f"{format_bytes(size / max(elapsed, 1e-9))}/s"
        if elapsed >= SLOW_DOWNLOAD_SECONDS:
            logger.warning(
                "slow download: %r from %s took %.1fs for %s (%s); check the network or the store",
                key, self._remote, elapsed, format_bytes(size), rate,
            )
        else:
            logger.debug("downloaded %r from %s: %s in %.3fs (%s)", key, self._remote, format_bytes(size), elapsed, rate)
        return size

    def _download_shard(self, entry: ShardEntry) -> None:
        """Download, verify and place a shard; a shard that fails verification is fetched again."""
        attempts = self._policy.attempts
        for attempt in range(1, attempts + 1):
            staged = _Staged()
            try:
                for raw, stored in entry.file_pairs():
                    self._stage_pair(entry, raw, stored, staged)
            except ShardIntegrityError as error:
                self._discard(entry)
                if attempt == attempts:
                    raise ShardIntegrityError(
                        f"shard {entry.raw_data.basename!r}: expected the files index.json describes, found a "
                        f"mismatch on each of {attempts} download(s); last: {error}. The remote copy is corrupt "
                        "or index.json is stale: re-write or re-upload the shard"
                    ) from error
                logger.warning(
                    "shard %r from %s does not match index.json on download %d of %d (%s); the remote may have "
                    "changed since the index was read: downloading it again",
                    entry.raw_data.basename, self._remote, attempt, attempts, error,
                )
                self._record.record_retry()
                continue
            except BaseException:
                self._remove_temporaries(entry)
                raise
            self._place(staged)
            self._record.record_download(staged.downloaded)
            return

    def _stage_pair(self, entry: ShardEntry, raw: FileInfo, stored: FileInfo | None, staged: _Staged) -> None:
        raw_final = self._local / raw.basename
        raw_temporary = _temporary(raw_final)
        if stored is None:
            staged.downloaded += self._fetch_verified(raw, raw_temporary)
            staged.moves.append((raw_temporary, raw_final))
            return
        zip_final = self._local / stored.basename
        zip_source = zip_final
        # A compressed copy kept earlier (keep_zip) was verified when placed: decompress it, no download.
        if not _has_size(zip_final, stored.bytes):
            zip_source = _temporary(zip_final)
            staged.downloaded += self._fetch_verified(stored, zip_source)
        assert entry.compression is not None, "an entry with zip_data names its compression"
        decompress_file(
            entry.compression, zip_source, raw_temporary, source=str(zip_final), expected_size=raw.bytes
        )
        self._verify(raw, raw_temporary, required=False)
        if self._config.keep_zip:
            if zip_source != zip_final:
                staged.moves.append((zip_source, zip_final))  # placed before the raw file
        else:
            staged.drop_after.append(zip_source)
        staged.moves.append((raw_temporary, raw_final))

    def _fetch_verified(self, info: FileInfo, temporary: Path) -> int:
        self._download(info.basename, temporary)
        self._verify(info, temporary, required=True)
        return info.bytes

    def _verify(self, info: FileInfo, path: Path, *, required: bool) -> None:
        """Check size, then the ``validate_hash`` digest (``required``: the index must record it)."""
        found = path.stat().st_size
        if found != info.bytes:
            raise ShardIntegrityError(
                f"{info.basename}: expected {info.bytes} bytes (from index.json), found {found}; the download "
                "was cut short or the remote file differs from the index"
            )
        algorithm = self._config.validate_hash
        if algorithm is not None and (required or algorithm in info.hashes):
            verify_digests(info.hashes, path, source=info.basename, names=[algorithm])

    def _discard(self, entry: ShardEntry) -> None:
        """Remove every temporary and any compressed local copy of this shard: the next attempt starts clean."""
        self._remove_temporaries(entry)
        for _, stored in entry.file_pairs():
            if stored is not None:
                (self._local / stored.basename).unlink(missing_ok=True)

    def _place(self, staged: _Staged) -> None:
        for temporary, final in staged.moves:
            publish(temporary, final)
        for path in staged.drop_after:
            path.unlink(missing_ok=True)

    def _decompress_in_place(self, entry: ShardEntry) -> None:
        """Local-only stream: decompress missing raw files next to their compressed files (kept: the only copy)."""
        for raw, stored in entry.file_pairs():
            raw_final = self._local / raw.basename
            if _has_size(raw_final, raw.bytes):
                continue
            if stored is None or not (self._local / stored.basename).is_file():
                raise self._missing_locally(raw, stored)
            raw_temporary = _temporary(raw_final)
            try:
                decompress_file(
                    entry.compression or "",
                    self._local / stored.basename,
                    raw_temporary,
                    source=str(self._local / stored.basename),
                    expected_size=raw.bytes,
                )
                self._verify(raw, raw_temporary, required=False)
            except BaseException:
                raw_temporary.unlink(missing_ok=True)
                raise
            publish(raw_temporary, raw_final)

    def _missing_locally(self, raw: FileInfo, stored: FileInfo | None) -> Exception:
        path = self._local / raw.basename
        if path.is_file():
            return ShardIntegrityError(
                f"{path}: expected {raw.bytes} bytes (from index.json), found {path.stat().st_size} in the "
                "local-only stream; the file was changed after the index was written: re-write the dataset"
            )
        alternative = f" or {self._local / stored.basename}" if stored is not None else ""
        return RemoteNotFoundError(
            f"{path}: expected the shard file{alternative} in the local-only stream {self._config.local!r}, "
            "found none; point local at the dataset folder, or pass remote= to download it"
        )
