"""``ShardCache``: shards of one stream, downloaded once per node into its ``local`` folder.

Shards live under their index basenames, as MosaicML lays them out (``local/shard.00000.mds``). All
processes that share ``local`` coordinate through ``local/.stream_plugin/`` only (see ``locks.py``):

* A shard counts as present when every raw file it has (data, and meta for JSON/CSV) exists with the
  size ``index.json`` records; checking that takes no lock.
* Otherwise one process takes the shard's exclusive lock, downloads into temporaries, verifies size
  (and digest with ``validate_hash``), decompresses, verifies again, and renames into place; every
  other process blocks on the same lock and then finds the shard present.
* Readers hold the shard's lock shared, so eviction (which needs it exclusive) skips them.

``ShardCache`` is the facade that runs this protocol; each job is a module of its own:

* the stream's index and the remote's identity of it: ``remote_index.py`` (and ``known_shards.py``);
* claiming the folder for one remote, and staying inside it: ``folder_claim.py``;
* download, verify and decompress one shard: ``shard_download.py`` (over ``downloads.py`` and
  ``shard_files.py``);
* the node's future, for Belady: ``belady_clock.py``;
* eviction: decided in ``eviction.py`` alone; ``stream_eviction.py`` hands it this stream's shards.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import numpy as np

from stream_plugin.cache.belady_clock import BeladyClock
from stream_plugin.cache.cache_config import CacheConfig
from stream_plugin.cache.downloads import Downloader
from stream_plugin.cache.first_shards import FirstShards
from stream_plugin.cache.folder_claim import ShardPathCheck, canonical_remote, claim_folder, remote_store
from stream_plugin.cache.future import NEVER, NodeFuture
from stream_plugin.cache.index_store import OpenedIndex
from stream_plugin.cache.known_shards import KnownShards
from stream_plugin.cache.locks import ControlFolder, locked, touch
from stream_plugin.cache.reader_clocks import ReaderClocks, ReaderPlace
from stream_plugin.cache.remote_index import RemoteIndex
from stream_plugin.cache.shard_download import ShardFetcher
from stream_plugin.cache.shard_files import is_present, remove_temporaries
from stream_plugin.cache.start_stagger import StartGate
from stream_plugin.cache.stats import CacheStats, StatsGroup
from stream_plugin.cache.stream_eviction import StreamEviction
from stream_plugin.errors import ConfigError, ShardIntegrityError
from stream_plugin.format.index import INDEX_BASENAME, ShardEntry
from stream_plugin.storage.base import ObjectStore
from stream_plugin.storage.retry import RetryPolicy
from stream_plugin.storage.throttle import NodeThrottle

# How often ``reading`` re-downloads a shard that another process evicted between the download and
# the shared lock, before deciding the cache is too small to make progress.
_READ_ATTEMPTS = 3


class ShardCache:
    """Downloads, verifies, places, protects and evicts the shards of one stream on this node."""

    def __init__(
        self,
        config: CacheConfig,
        store: ObjectStore | None = None,
        stats: CacheStats | None = None,
        start: StartGate | None = None,
        first: FirstShards | None = None,
    ) -> None:
        """``start``: this process's hold on its first shard downloads (``start_stagger``), shared by the
        caches of its streams; None downloads at once. ``first``: the node's cap on first-shard downloads
        (``first_shards``), shared likewise; None caps nothing."""
        self._config = config
        self._first = first
        self._start = start if start is not None and not start.spent else None
        self._local = Path(config.local)
        self._control = ControlFolder(self._local)
        self._remote = canonical_remote(config.remote) if config.remote is not None else None
        self._store = remote_store(config, self._remote, store)
        if self._remote is not None:
            claim_folder(self._control, self._remote, config.local)
        self._stats, self._record = self._statistics(stats)
        policy = RetryPolicy.from_mosaic(config.download_retry, config.download_timeout, config.throttle_deadline)
        downloader = self._downloader(policy)
        self._index = RemoteIndex(config, self._control, downloader)
        self._index_name = INDEX_BASENAME
        self._shards = KnownShards(
            ShardPathCheck(self._local, follows_links=self._remote is not None), self._read_local_index
        )
        self._fetcher = ShardFetcher(
            self._local,
            downloader,
            self._record,
            attempts=policy.attempts,
            keep_zip=config.keep_zip,
            validate_hash=config.validate_hash,
        )
        self._verified: set[str] = set()  # shards whose validate_hash digest this process checked
        self._clock = BeladyClock()
        self._reader_clocks: ReaderClocks | None = None
        self._eviction = StreamEviction(
            config, self._control, self._record, self._shards, self._clock, has_remote=self._remote is not None
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
        return self._index.fetch(index_name)

    def index_identity(self, index_name: str = INDEX_BASENAME) -> str | None:
        """The remote identity recorded when ``index_name`` was cached; None when the store gives none."""
        return self._index.identity(index_name)

    def opened_index(self, index_name: str = INDEX_BASENAME) -> OpenedIndex:
        """Fetch the index and return it validated, as columns with entries built on demand.

        One process per node parses it; the others load the parse it kept (``index_store``): in the
        cache folder of a remote stream, in this user's cache for a local-only one (whose folder is the
        user's dataset, never written to).
        """
        return self._index.kept(self.fetch_index(index_name), index_name)

    def open_index(self, index_name: str = INDEX_BASENAME) -> list[ShardEntry]:
        """Fetch the index, and remember its shards for eviction; return them (each built now)."""
        entries = list(self.opened_index(index_name).entries)
        self.set_shards(entries)
        return entries

    def set_shards(self, entries: Sequence[ShardEntry]) -> None:
        """Tell the cache every shard of the stream: usage and eviction consider exactly these.

        Without this call, eviction reads the local index by itself the first time it needs it.
        """
        self._shards.set_all(entries)

    def check_working_set(self, readers: int, shards_per_reader: int = 2) -> None:
        """Raise ``ConfigError`` now if ``cache_limit`` cannot hold ``readers`` x ``shards_per_reader`` shards."""
        self._eviction.check_working_set(readers, shards_per_reader)

    # -- the node's future (eviction="belady") ----------------------------------------------------

    @property
    def follows_future(self) -> bool:
        """Whether eviction here ranks shards by the node's future: a cache_limit, a remote, "belady"."""
        return self._eviction.follows_future

    def expect(
        self,
        future: NodeFuture | None,
        shard_of: Mapping[str, int],
        *,
        reach: int = NEVER,
        place: ReaderPlace | None = None,
    ) -> None:
        """Evict by ``future`` from now on: ``shard_of`` maps a shard's raw basename to its column in it.

        A download ahead evicts only for a shard read within ``reach`` of now (node time): the farther
        ahead, the less the farthest shard now is the one the offline optimum would evict then. None
        forgets the future (eviction falls back to least recently used). ``place``: this reader among the
        node's, which share their times through this folder (``reader_clocks``).
        """
        readers = None
        if place is not None and future is not None:
            if self._reader_clocks is None or self._reader_clocks.place != place:
                self._reader_clocks = ReaderClocks(self._control.reader_clocks, place)
            readers = self._reader_clocks
        self._clock.expect(future, shard_of, reach=reach, readers=readers)

    def leave_clock(self) -> None:
        """This process stopped reading for now (``BeladyClock.leave``)."""
        self._clock.leave()

    def advance_clock(self, now: int) -> None:
        """This process's time on the node's clock (the times of ``expect``'s future)."""
        self._clock.advance(now)

    def next_uses(self, entries: Sequence[ShardEntry], at: int | None = None) -> np.ndarray | None:
        """When the node reads each shard next (node time; ``NEVER``: not in the known future); None
        while no future is known. ``at``: seen from that node time (``BeladyClock.next_uses``)."""
        return self._clock.next_uses(entries, at)

    def read_times(self, entries: Sequence[ShardEntry]) -> np.ndarray | None:
        """When the node next reads each shard, from this process's clock (``BeladyClock.read_times``)."""
        return self._clock.read_times(entries)

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
        self._shards.remember(entry)
        start = self._start
        if start is not None:  # only while this process's first downloads are held back (start_stagger)
            if start.spent:
                self._start = start = None
            else:
                start.ask()
        if self._is_present(entry) and self._verified_once(entry):
            return self._hit()
        if start is not None and self._store is not None:
            start.wait()  # before the shard lock: no other process waits on this one's hold
        lock = self._control.shard_lock(entry.raw_data.basename)
        with locked(lock):
            if self._is_present(entry) and self._verified_once(entry, repair=True):
                return self._hit()  # another process placed it while we waited
            remove_temporaries(self._local, entry)
            if self._store is None:
                self._fetcher.decompress_in_place(entry, self._config.local)
            else:
                with self._eviction.room_for(entry, ahead=ahead) as room:
                    if not room:
                        return None
                    with self._first_slot():
                        self._fetcher.fetch(entry)
            self._verified.add(entry.raw_data.basename)
            touch(lock)
        return self._local

    def _hit(self) -> Path:
        """A shard found in the cache: counted, and this process's first shard (``first_shards``)."""
        self._record.record_hit()
        if self._first is not None:
            self._first.reach()
        return self._local

    def _first_slot(self) -> AbstractContextManager[None]:
        """A node slot for this download while the process has no first shard (``first_shards``)."""
        return self._first.slot(self._control) if self._first is not None else nullcontext()

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
                self._fetcher.verify(raw, self._local / raw.basename, required=False)
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
        if self._store is None or not self._eviction.limited:
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

    # -- eviction (decided in eviction.py; stream_eviction.py hands it this stream's shards) ----------

    def evict_to_limit(self) -> int:
        """Evict shards nobody reads (the policy's order) until usage fits ``cache_limit``; bytes freed."""
        return self._eviction.evict_to_limit()

    def usage(self) -> int:
        """Bytes the stream's shards occupy in ``local`` now (every process's downloads count)."""
        return self._eviction.usage()

    def evict(self, entry: ShardEntry) -> int:
        """Delete one shard's files now unless a process reads or downloads it; return bytes freed.

        A stream with no remote is never evicted: its files are the only copy.
        """
        return self._eviction.evict(entry)

    def present_by_age(self) -> list[tuple[int, ShardEntry]]:
        """``(last use in ns, shard)`` of the stream's cached shards, least recently used first."""
        return self._eviction.present_by_age()

    # -- internals --------------------------------------------------------------------------------

    def _downloader(self, policy: RetryPolicy) -> Downloader | None:
        """Requests to the remote's store, paced by one request rate every process of the node shares."""
        if self._store is None:
            return None
        assert self._remote is not None
        throttle = NodeThrottle.for_node(self._control.throttle, self._remote)
        return Downloader(
            self._store,
            self._remote,
            policy,
            throttle,
            timeout=self._config.download_timeout,
            on_retry=self._record.record_retry,
        )

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

    def _read_local_index(self) -> Sequence[ShardEntry] | None:
        """The shards of the index in ``local`` (fetched by any process of the node), None while absent."""
        path = self._local / self._index_name
        if not path.is_file():
            return None
        return self._index.kept(path, self._index_name).entries

    def _is_present(self, entry: ShardEntry) -> bool:
        return is_present(self._local, entry)


__all__ = ["CacheConfig", "ShardCache", "canonical_remote"]
