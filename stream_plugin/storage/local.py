"""``LocalStore``: a folder on a local or mounted file system, addressed by path or ``file://`` URL."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

from stream_plugin.errors import ConfigError, StorageError
from stream_plugin.fileio import temporary_sibling
from stream_plugin.redaction import redact_url
from stream_plugin.storage.base import (
    ObjectInfo,
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    check_complete,
    check_key,
)


def local_root(url: str | os.PathLike[str]) -> Path:
    """The folder a local path or ``file://`` URL names (``file:///data/x`` → ``/data/x``)."""
    text = os.fspath(url)
    if not text.startswith("file:"):
        return Path(text).expanduser()
    parts = urlsplit(text)
    if parts.netloc not in ("", "localhost"):
        raise ConfigError(
            f"Expected a file:// URL on this host (file:///path), found host {parts.netloc!r} in {text!r}; "
            f"mount the share and pass its local path."
        )
    return Path(unquote(parts.path))


@contextmanager
def _mapped_errors(path: Path, action: str) -> Iterator[None]:
    """Turn OS errors into the storage error classes, naming the path and what to check."""
    try:
        yield
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as error:
        raise RemoteNotFoundError(
            f"Expected a file at {str(path)!r} to {action}, found none ({error.strerror}); check the path."
        ) from error
    except PermissionError as error:
        raise RemoteAccessDeniedError(
            f"Expected permission to {action} {str(path)!r}, found access denied; check the file permissions."
        ) from error
    except OSError as error:
        raise StorageError(
            f"Expected to {action} {str(path)!r}, found {type(error).__name__}: {error}; check the disk and path."
        ) from error


def _is_temporary(name: str) -> bool:
    """Whether ``name`` is an in-progress upload made by ``fileio.temporary_sibling``."""
    return name.startswith(".") and ".tmp-" in name


class LocalStore:
    """An ``ObjectStore`` over a local folder: keys are relative paths under ``root``.

    Uploads go through a temporary sibling and an atomic rename, so readers of the folder never see a
    partial file.
    """

    def __init__(self, url: str | os.PathLike[str]) -> None:
        self.url = os.fspath(url)
        self.root = local_root(url)

    def __repr__(self) -> str:
        return f"LocalStore({redact_url(self.url)!r})"

    def path_of(self, key: str) -> Path:
        """The local path that holds ``key``."""
        return self.root / check_key(key, self.url)

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        """Copy the file to ``dest``; ``timeout`` is accepted for the protocol and ignored."""
        source = self.path_of(key)
        with _mapped_errors(source, "download"):
            shutil.copyfile(source, dest)
        return os.path.getsize(dest)

    def upload(self, src: str | os.PathLike[str], key: str) -> None:
        """Copy ``src`` under ``key`` via a temporary sibling and an atomic rename."""
        target = self.path_of(key)
        if target.exists() and os.path.samefile(src, target):
            return  # Writing a dataset in place: the file already sits where the store serves it.
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = temporary_sibling(target)
        try:
            with _mapped_errors(Path(src), "upload"):
                shutil.copyfile(src, temporary)
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)

    def read_bytes(self, key: str, *, timeout: float | None = None) -> bytes:
        """The file's contents."""
        source = self.path_of(key)
        with _mapped_errors(source, "read"):
            return source.read_bytes()

    def exists(self, key: str) -> bool:
        """Whether a regular file is stored under ``key``."""
        return self.path_of(key).is_file()

    def identity(self, key: str, *, timeout: float | None = None) -> str | None:
        """Modification time, size and inode: an atomic rewrite (a new file renamed in) changes them."""
        return self.object_info(key).identity

    def object_info(self, key: str, *, timeout: float | None = None) -> ObjectInfo:
        """The file's size, and the ``identity`` above."""
        source = self.path_of(key)
        with _mapped_errors(source, "check"):
            found = source.stat()
        return ObjectInfo(found.st_size, f"mtime_ns={found.st_mtime_ns} size={found.st_size} inode={found.st_ino}")

    def read_range(self, key: str, start: int, end: int, *, timeout: float | None = None) -> bytes:
        """Bytes ``[start, end)`` of the file; fewer (the file shrank) is a ``TransientStorageError``."""
        if end <= start:
            return b""
        source = self.path_of(key)
        with _mapped_errors(source, "read"), open(source, "rb") as handle:
            handle.seek(start)
            data = handle.read(end - start)
        check_complete(str(source), end - start, len(data))
        return data

    def delete(self, key: str) -> None:
        """Remove the file under ``key``; a missing file is not an error."""
        target = self.path_of(key)
        with _mapped_errors(target, "delete"):
            target.unlink(missing_ok=True)

    def list(self, prefix: str = "") -> list[str]:
        """Relative ``/``-separated paths of the files under ``prefix``, sorted; temporaries hidden."""
        relative_prefix = check_key(prefix, self.url)
        # Walk only the deepest folder the prefix names; "a/b" may match the folder a/b or a file a/bc.
        start = self.root / os.path.dirname(relative_prefix)
        keys: list[str] = []
        for folder, _, files in os.walk(start):
            for name in files:
                if _is_temporary(name):
                    continue
                key = Path(folder, name).relative_to(self.root).as_posix()
                if key.startswith(relative_prefix):
                    keys.append(key)
        return sorted(keys)
