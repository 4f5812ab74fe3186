"""``RemoteIndex``: the stream's ``index.json`` in ``local``, and the remote's identity it was cached at.

One process per node downloads the index (under its index lock), refuses to publish something that is
not an index, keeps its parse (``index_store``) and records the remote's identity of it (ETag and
last-modified time, or a generation). A cached copy is reused only while the remote's identity is
unchanged: a rewritten remote raises ``RemoteChangedError`` instead of mixing old cached shards with new
ones. An unreachable remote (or a store that gives no identity) leaves the cached copy in use.
"""

from __future__ import annotations

from pathlib import Path

from stream_plugin.cache.cache_config import CacheConfig
from stream_plugin.cache.downloads import Downloader
from stream_plugin.cache.index_store import OpenedIndex, open_index, store_columns
from stream_plugin.cache.locks import ControlFolder, kept_index_folder, locked
from stream_plugin.cache.shard_files import temporary
from stream_plugin.errors import RemoteChangedError, StorageError
from stream_plugin.fileio import atomic_write_bytes, publish
from stream_plugin.format.index_columns import read_columns
from stream_plugin.redaction import get_logger
from stream_plugin.storage.base import RemoteNotFoundError

_log = get_logger(__name__)


class RemoteIndex:
    """The index of one stream cached in ``config.local``: fetched once per node, checked against the remote."""

    def __init__(self, config: CacheConfig, control: ControlFolder, downloader: Downloader | None) -> None:
        """``downloader`` None: a local-only stream, whose index is read in place."""
        self._config = config
        self._local = Path(config.local)
        self._control = control
        self._downloader = downloader

    def fetch(self, index_name: str) -> Path:
        """Make ``local/index_name`` exist and return its path; one process per node downloads it."""
        path = self._local / index_name
        if self._downloader is None:
            return path
        current = self._remote_identity(index_name, cached=path.is_file())
        record = self._control.index_identity(index_name)
        if path.is_file():
            self._check_unchanged(index_name, record, current)
            return path
        with locked(self._control.index_lock(index_name)):
            if not path.is_file():
                self._download(index_name, path, record, current)
            else:
                self._check_unchanged(index_name, record, current)
        return path

    def identity(self, index_name: str) -> str | None:
        """The remote identity recorded when ``index_name`` was cached; None when the store gives none."""
        try:
            return self._control.index_identity(index_name).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def kept(self, path: Path, index_name: str) -> OpenedIndex:
        """The fetched index at ``path``, from the parse this node keeps (parsed now if there is none):
        in the cache folder of a remote stream, in this user's cache for a local-only one (whose folder
        is the user's dataset, never written to)."""
        control = self._control if self._downloader is not None else kept_index_folder(self._config.local)
        return open_index(path, control, index_name, identity=self.identity(index_name))

    def _download(self, index_name: str, path: Path, record: Path, current: str | None) -> None:
        assert self._downloader is not None
        download = temporary(path)
        try:
            self._downloader.download(index_name, download)
            # Refuse to publish something that is not an index; the next process would trust it.
            # The parse is kept (index_store): no process of this node parses the index again.
            with open(download, "rb") as file:
                columns, _, digest = read_columns(
                    file, source=f"{self._downloader.remote}/{index_name}", identity=current
                )
            if current is not None:
                atomic_write_bytes(record, current.encode("utf-8"))
            else:
                record.unlink(missing_ok=True)
            publish(download, path)
            store_columns(self._control.index_columns(index_name), path, columns, digest=digest, identity=current)
        finally:
            download.unlink(missing_ok=True)

    def _remote_identity(self, index_name: str, *, cached: bool) -> str | None:
        """The remote's identity of the index now; None when the store gives none or, with a cached copy,
        when the remote cannot be reached (reading offline from a complete cache keeps working)."""
        assert self._downloader is not None
        remote = self._downloader.remote
        try:
            return self._downloader.identity(index_name)
        except RemoteNotFoundError:
            if cached:
                raise RemoteChangedError(
                    f"{remote}/{index_name}: expected the remote index that {self._config.local!r} "
                    "caches, found none (the remote dataset was deleted, or is being rewritten); wait for "
                    f"the writer to finish, then delete {self._config.local!r} (or use a new local folder)"
                ) from None
            raise
        except StorageError as error:
            if not cached:
                raise
            _log.warning(
                "%s/%s: could not check whether the remote index changed (%s); reading the cached copy in %s",
                remote,
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
            assert self._downloader is not None
            raise RemoteChangedError(
                f"{self._downloader.remote}/{index_name}: expected the remote index {self._config.local!r} cached "
                f"({recorded}), found it rewritten ({current}); the cached shards may belong to the old "
                f"dataset. Delete {self._config.local!r} (or point local at a new folder) to read the new "
                "dataset; a state saved on the old data will be refused"
            )


__all__ = ["RemoteIndex"]
