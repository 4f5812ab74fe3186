"""Claiming a ``local`` folder for one remote, and keeping the cache's files inside it.

A folder caches one remote (recorded in ``.stream_plugin/remote``; a second is refused: their shard
names collide), never the remote itself, and never writes or deletes outside itself: no shard may be
named into the control folder, and no shard sub-folder may be a symlink that leads out.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from stream_plugin.cache.cache_config import CacheConfig
from stream_plugin.cache.locks import ControlFolder, is_control, locked
from stream_plugin.errors import ConfigError, UnsafePathError
from stream_plugin.fileio import atomic_write_bytes
from stream_plugin.format.index import ShardEntry
from stream_plugin.redaction import redact_url
from stream_plugin.storage.base import ObjectStore
from stream_plugin.storage.local import local_root


def canonical_remote(remote: str) -> str:
    """The remote as recorded in the control folder: local paths resolved, no trailing ``/``, and no
    secret (``redact_url``: a password or a rotated token does not make it another remote)."""
    if "://" in remote and not remote.startswith("file:"):
        return redact_url(remote.rstrip("/"))
    return str(local_root(remote).resolve())


def remote_store(config: CacheConfig, remote: str | None, store: ObjectStore | None) -> ObjectStore | None:
    """The store shards come from (``store``, else one opened for ``config.remote``); None for a
    local-only stream. Refuses a store without a remote, and a remote that is the ``local`` folder."""
    if remote is None:
        if store is not None:
            raise ConfigError(
                "store: expected None for a local-only stream (remote=None), found a store; pass the "
                "store's URL as remote, or drop the store"
            )
        return None
    if remote == str(Path(config.local).resolve()):
        raise ConfigError(
            f"remote: expected a location other than local={config.local!r}, found the same folder; "
            "pass remote=None to read a local dataset in place"
        )
    if store is None:
        from stream_plugin.storage import open_store  # the registry of backends lives there

        assert config.remote is not None
        return open_store(config.remote)
    return store


def claim_folder(control: ControlFolder, remote: str, local: str) -> None:
    """Record which remote ``local`` caches; refuse a second one (their shard names collide)."""
    record = control.remote_record
    if not record.is_file():
        with locked(control.remote_lock):
            if not record.is_file():
                atomic_write_bytes(record, remote.encode("utf-8"))
    recorded = record.read_text(encoding="utf-8")
    if recorded != remote:
        raise ConfigError(
            f"local: expected {local!r} to cache remote {remote!r}, found it already caches "
            f"{recorded!r} (recorded in {record}); two remotes cannot share one local folder because their "
            "shard names collide. Use a different local folder (or split) for each remote"
        )


class ShardPathCheck:
    """Refuses shards whose files would land outside the cache's own part of ``local``."""

    def __init__(self, local: Path, *, follows_links: bool) -> None:
        """``follows_links``: whether sub-folders are checked for symlinks out (a remote stream's cache,
        which downloads and evicts; a local-only stream's folder is the user's dataset, only read)."""
        self._local = local
        self._follows_links = follows_links
        self._safe_folders: set[str] = set()  # shard sub-folders checked to stay inside local

    def check(self, entry: ShardEntry) -> None:
        for raw, stored in entry.file_pairs():
            for info in (raw, stored):
                if info is not None and is_control(info.basename):
                    raise UnsafePathError(
                        f"index.json: expected shard basenames outside the cache's control folder, found "
                        f"{info.basename!r}; rename the shard (regenerate the index)"
                    )
        if self._follows_links:
            self._refuse_links_out(entry)

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


__all__ = ["ShardPathCheck", "canonical_remote", "claim_folder", "remote_store"]
