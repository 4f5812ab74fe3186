"""OS file locks and the layout of the cache's control folder.

Every process on a node that caches into the same ``local`` folder (ranks x DataLoader workers, or two
runs one after the other) coordinates through files under ``local/.stream_plugin/`` only. Locks are
``fcntl.flock`` locks: the kernel releases them when their holder dies, so a crash never leaves a lock
behind and no clean-up step is ever needed. Waiting for a lock blocks in the kernel; nothing polls.

Lock files are never deleted: unlinking a lock file while another process waits on it would let two
holders lock two different inodes under one name. They are empty and one per shard, so keeping them
costs nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

CONTROL_DIRNAME = ".stream_plugin"


def _quoted(name: str) -> str:
    """A flat, injective file name for a shard basename ("3/shard.00000.mds" -> "3%2Fshard.00000.mds")."""
    return quote(name, safe="")


def kept_index_folder(local: str | os.PathLike[str]) -> ControlFolder:
    """Where the parsed index of a local-only dataset is kept: this user's cache
    (``$XDG_CACHE_HOME/stream_plugin/local-indexes``, else ``~/.cache/...``), keyed by the folder's
    absolute path. A dataset folder that is only read is never written to."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(str(Path(local).resolve()).encode("utf-8")).hexdigest()[:32]
    return ControlFolder(Path(cache) / "stream_plugin" / "local-indexes" / key)


@dataclass(frozen=True)
class ControlFolder:
    """Paths of the control files of one ``local`` folder; creating nothing by itself."""

    local: Path

    @property
    def root(self) -> Path:
        """The hidden folder that holds every control file (never a shard basename: see ``is_control``)."""
        return self.local / CONTROL_DIRNAME

    def shard_lock(self, basename: str) -> Path:
        """Download lock of one shard, keyed by its raw data basename: exclusive while it is fetched.

        Its modification time is the shard's last-use clock for eviction.
        """
        return self.root / "shards" / f"{_quoted(basename)}.lock"

    def use_lock(self, basename: str) -> Path:
        """In-use lock of one shard: shared while a reader has it open, exclusive to evict it.

        It is separate from the download lock so that a download never waits behind readers (a
        thread of the same process may hold the shard open for as long as it likes).
        """
        return self.root / "in-use" / f"{_quoted(basename)}.lock"

    def index_lock(self, index_name: str) -> Path:
        """Lock held by the one process that downloads ``index_name``."""
        return self.root / "index" / f"{_quoted(index_name)}.lock"

    def index_identity(self, index_name: str) -> Path:
        """The remote's identity of the cached ``index_name`` when it was downloaded (``ObjectStore.identity``)."""
        return self.root / "index" / f"{_quoted(index_name)}.identity"

    def index_columns(self, index_name: str) -> Path:
        """The parsed ``index_name`` in binary form (see ``index_store.py``), built once per node."""
        return self.root / "index" / f"{_quoted(index_name)}.columns"

    def first_shard_slot(self, index: int) -> Path:
        """Slot ``index`` of the node's first-shard downloads (``first_shards``): exclusive while held."""
        return self.root / "first-shards" / f"slot-{index}.lock"

    def reservation(self, basename: str) -> Path:
        """Record of the bytes an in-flight download of this shard will occupy once placed."""
        return self.root / "reserved" / _quoted(basename)

    @property
    def reservations(self) -> Path:
        """Folder of in-flight download reservations."""
        return self.root / "reserved"

    @property
    def reader_clocks(self) -> Path:
        """Folder of the node's shared reader clocks (``reader_clocks.py``), one file per reader count."""
        return self.root / "clocks"

    @property
    def eviction_lock(self) -> Path:
        """Node-wide lock around cache usage accounting and eviction."""
        return self.root / "evict.lock"

    @property
    def remote_record(self) -> Path:
        """File holding the remote this folder caches, so a second remote is refused."""
        return self.root / "remote"

    @property
    def remote_lock(self) -> Path:
        """Lock around creating ``remote_record``."""
        return self.root / "remote.lock"

    @property
    def throttle(self) -> Path:
        """Folder of the node's request rate per store (``storage.node_rate``): shared by every process
        that reads through this folder, so a throttling store paces the node as one."""
        return self.root / "throttle"

    @property
    def stats(self) -> Path:
        """Folder of per-process statistics files (see ``stats.py``)."""
        return self.root / "stats"


def is_control(basename: str) -> bool:
    """Whether a shard basename would land inside the control folder (such an index is refused)."""
    return basename.replace("\\", "/").split("/", 1)[0] == CONTROL_DIRNAME


def _open_lock_file(path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o644)


@contextmanager
def locked(path: str | os.PathLike[str], *, shared: bool = False) -> Iterator[None]:
    """Hold a flock on ``path`` (created if missing), blocking in the kernel until it is granted.

    Each call opens its own descriptor, so two threads of one process exclude each other just as two
    processes do.
    """
    descriptor = _open_lock_file(Path(path))
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing the last descriptor releases the lock


@contextmanager
def try_locked(path: str | os.PathLike[str], *, shared: bool = False) -> Iterator[bool]:
    """Try to flock ``path`` without waiting; yield whether the lock is held for the ``with`` body."""
    descriptor = _open_lock_file(Path(path))
    try:
        try:
            fcntl.flock(descriptor, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True
    finally:
        os.close(descriptor)


def is_locked_exclusively(path: str | os.PathLike[str]) -> bool:
    """Whether some descriptor (any process or thread) holds an exclusive lock on ``path`` right now."""
    with try_locked(path, shared=True) as acquired:
        return not acquired


def touch(path: str | os.PathLike[str]) -> None:
    """Set ``path``'s modification time to now: the cache's least-recently-used clock.

    The time is passed explicitly because the kernel's own file timestamps tick in milliseconds, too
    coarse to order two reads in a row.
    """
    now = time.time_ns()
    try:
        os.utime(path, ns=(now, now))
    except FileNotFoundError:
        os.close(_open_lock_file(Path(path)))
        os.utime(path, ns=(now, now))
