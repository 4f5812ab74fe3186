"""``FsspecStore``: any fsspec filesystem (``sftp://``, ``abfs://``, ``memory://``, ...).

The fallback for schemes with no native backend: ``open_store`` uses it when fsspec knows the
protocol. Options are the filesystem's own ``storage_options`` (credentials, endpoints), passed to
``fsspec.core.url_to_fs``. A protocol whose implementation is not installed gets a
``MissingDependencyError`` naming the package fsspec asks for (``Install huggingface_hub ...``).

Timeouts: fsspec has no common per-call timeout, so ``timeout`` bounds nothing here; set the
filesystem's own (``client_kwargs``, ``timeout``) through the options where it has one.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import fsspec
from fsspec.registry import known_implementations

from stream_plugin.errors import ConfigError, MissingDependencyError, StorageError
from stream_plugin.redaction import redact_url
from stream_plugin.storage.base import (
    ObjectInfo,
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    ThrottledError,
    TransientStorageError,
    check_complete,
    check_key,
    join_key,
)
from stream_plugin.storage.per_process import PerProcess
from stream_plugin.storage.registry import scheme_of
from stream_plugin.storage.throttle_hints import requested_wait

CHUNK_SIZE = 1 << 20
# What fsspec's info() may report that changes when an object is rewritten, by filesystem.
IDENTITY_FIELDS = (
    "generation",
    "ETag",
    "etag",
    "version_id",
    "Last-Modified",
    "LastModified",
    "last_modified",
    "mtime",
    "updated",
    "created",
)
TRANSIENT_STATUS = frozenset({408, 425, 429})


def filesystem_class(protocol: str) -> type[fsspec.AbstractFileSystem]:
    """fsspec's class for ``protocol``; a missing implementation names the package to install."""
    try:
        return fsspec.get_filesystem_class(protocol)
    except ImportError as error:
        hint = known_implementations.get(protocol, {}).get("err") or f"install the fsspec implementation of {protocol}://"
        raise MissingDependencyError(
            f"Expected an fsspec implementation for {protocol}:// URLs, found it not installed ({error}); {hint}."
        ) from error
    except ValueError as error:
        raise ConfigError(
            f"Expected a protocol fsspec knows, found {protocol!r} ({error}); check the URL's scheme."
        ) from error


class FsspecStore:
    """An ``ObjectStore`` over ``<protocol>://<root>`` on an fsspec filesystem; keys are relative paths.

    Uploads write through the filesystem's ``put_file``: object stores (and fsspec's memory filesystem)
    publish a file only once it is complete. The filesystem is built lazily in each process (fsspec's
    async filesystems are not fork-safe); the store pickles as its URL and options.
    """

    def __init__(self, url: str, **storage_options: Any) -> None:
        self.url = url
        self.protocol = scheme_of(url)
        filesystem_class(self.protocol)  # fail at construction when the implementation is missing
        self.storage_options = dict(storage_options)
        self._filesystem = PerProcess(self._open_filesystem)

    def __repr__(self) -> str:
        return f"FsspecStore({redact_url(self.url)!r})"

    # --- the filesystem: one per process -----------------------------------------------------------

    def filesystem(self) -> tuple[fsspec.AbstractFileSystem, str]:
        """This process's filesystem and the root path the URL names on it."""
        return self._filesystem.get()

    def _open_filesystem(self) -> tuple[fsspec.AbstractFileSystem, str]:
        with self._mapped_errors(self.url, "open"):
            fs, root = fsspec.core.url_to_fs(self.url, **self.storage_options)
        return fs, root.rstrip("/")

    def path_of(self, key: str) -> str:
        """The filesystem path holding ``key``."""
        _, root = self.filesystem()
        relative = check_key(key, self.url)
        return posixpath.join(root, relative) if root else relative

    # --- error mapping -----------------------------------------------------------------------------

    @contextmanager
    def _mapped_errors(self, path: str, action: str) -> Iterator[None]:
        """Turn filesystem failures into the storage error classes, naming the path and what to check."""
        where = f"{self.protocol}://{path.lstrip('/')}" if "://" not in path else path
        try:
            yield
        except (MissingDependencyError, StorageError):
            raise  # already ours (StorageError is an OSError: keep it from the branches below)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as error:
            raise RemoteNotFoundError(
                f"Expected {where} to exist to {action} it, found none ({error}); check the path."
            ) from error
        except PermissionError as error:
            raise RemoteAccessDeniedError(
                f"Expected access to {action} {where}, found {error}; check the credentials in storage_options."
            ) from error
        except (ConnectionError, TimeoutError) as error:
            raise TransientStorageError(
                f"Expected to {action} {where}, found {type(error).__name__}: {error}; will retry."
            ) from error
        except Exception as error:
            raise _classify(error, where, action) from error

    # --- ObjectStore -------------------------------------------------------------------------------

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        """Stream the file into ``dest``; a body shorter than the size the filesystem reports is transient."""
        fs, _ = self.filesystem()
        path = self.path_of(key)
        written = 0
        with self._mapped_errors(path, "download"):
            expected = fs.size(path)
            with fs.open(path, "rb") as source, open(dest, "wb") as handle:
                while chunk := source.read(CHUNK_SIZE):
                    handle.write(chunk)
                    written += len(chunk)
        check_complete(f"{self.protocol}://{path}", expected, written)
        return written

    def upload(self, src: str | os.PathLike[str], key: str) -> None:
        """Copy ``src`` under ``key`` with the filesystem's ``put_file``."""
        fs, _ = self.filesystem()
        path = self.path_of(key)
        with self._mapped_errors(path, "upload"):
            parent = posixpath.dirname(path)
            if parent:
                fs.makedirs(parent, exist_ok=True)
            fs.put_file(os.fspath(src), path)

    def read_bytes(self, key: str, *, timeout: float | None = None) -> bytes:
        """The whole file."""
        fs, _ = self.filesystem()
        path = self.path_of(key)
        with self._mapped_errors(path, "read"):
            data: bytes = fs.cat_file(path)
        return data

    def exists(self, key: str) -> bool:
        """Whether a file (not a folder) is stored under ``key``."""
        fs, _ = self.filesystem()
        path = self.path_of(key)
        with self._mapped_errors(path, "check"):
            return bool(fs.isfile(path))

    def delete(self, key: str) -> None:
        """Remove the file; a missing file is not an error (as on S3)."""
        fs, _ = self.filesystem()
        path = self.path_of(key)
        try:
            with self._mapped_errors(path, "delete"):
                fs.rm_file(path)
        except RemoteNotFoundError:
            pass

    def identity(self, key: str, *, timeout: float | None = None) -> str | None:
        """What ``info()`` reports that changes on a rewrite (generation, ETag, modification time); None
        when the filesystem reports none of them (plain HTTP servers often do not)."""
        return self.object_info(key, timeout=timeout).identity

    def object_info(self, key: str, *, timeout: float | None = None) -> ObjectInfo:
        """The file's size and ``identity``, from one ``info()``."""
        fs, _ = self.filesystem()
        path = self.path_of(key)
        with self._mapped_errors(path, "check"):
            info = fs.info(path)
        if info.get("size") is None:
            raise StorageError(
                f"Expected a size in {self.protocol}://{path}'s info(), found none; ranged reads need it: use a "
                f"filesystem that reports sizes."
            )
        found = [f"{name}={info[name]}" for name in IDENTITY_FIELDS if info.get(name) is not None]
        return ObjectInfo(int(info["size"]), " ".join(found) or None)

    def read_range(self, key: str, start: int, end: int, *, timeout: float | None = None) -> bytes:
        """Bytes ``[start, end)`` of the file (``cat_file`` with ``start``/``end``); another length is transient."""
        if end <= start:
            return b""
        fs, _ = self.filesystem()
        path = self.path_of(key)
        with self._mapped_errors(path, "read"):
            data: bytes = fs.cat_file(path, start=start, end=end)
        check_complete(f"{self.protocol}://{path} [{start}, {end})", end - start, len(data))
        return data

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix``, relative to the store root, sorted."""
        fs, root = self.filesystem()
        relative_prefix = check_key(prefix, self.url)
        start = join_key(root, posixpath.dirname(relative_prefix))
        if root.startswith("/"):
            start = "/" + start
        with self._mapped_errors(start, "list"):
            try:
                found = fs.find(start)
            except FileNotFoundError:
                return []
        keys = []
        for path in found:
            key = _relative(fs._strip_protocol(path), root)
            if key is not None and key.startswith(relative_prefix):
                keys.append(key)
        return sorted(keys)


def _relative(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` (both as the filesystem spells them), or None when outside it."""
    path, root = path.strip("/"), root.strip("/")
    if not root:
        return path
    return path[len(root) + 1 :] if path.startswith(f"{root}/") else None


def _classify(error: Exception, where: str, action: str) -> StorageError:
    """Map a filesystem-specific error (aiohttp's, paramiko's, ...) by the HTTP status it carries."""
    status = getattr(error, "status", None) or getattr(error, "status_code", None) or getattr(error, "code", None)
    found = f"{type(error).__name__}: {error}"
    if isinstance(status, int):
        if status in (401, 403):
            return RemoteAccessDeniedError(
                f"Expected access to {action} {where}, found {found}; check the credentials in storage_options."
            )
        if status == 429:
            headers = getattr(error, "headers", None)
            return ThrottledError(
                f"Expected to {action} {where}, found {found} (the store's rate limit); waiting, then trying again.",
                wait=requested_wait(headers if isinstance(headers, Mapping) else None),
            )
        if status >= 500 or status in TRANSIENT_STATUS:
            return TransientStorageError(f"Expected to {action} {where}, found {found}; will retry.")
    if type(error).__module__.split(".")[0] in ("aiohttp", "asyncio") or isinstance(error, OSError):
        return TransientStorageError(f"Expected to {action} {where}, found {found}; will retry.")
    return StorageError(f"Expected to {action} {where}, found {found}; check the URL and storage_options.")
