"""The storage contract: the ``ObjectStore`` protocol, its error classes, and key helpers.

Every backend (local, S3, HTTP, third-party plugins) implements :class:`ObjectStore` and raises the
three error classes below, so the retry loop and the cache can decide what to do from the class alone:
``RemoteNotFoundError`` and ``RemoteAccessDeniedError`` fail fast, ``TransientStorageError`` is retried,
and its subclass ``ThrottledError`` (the store's rate limit) is waited out without counting an attempt.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from stream_plugin.errors import StorageError


class RemoteNotFoundError(StorageError, FileNotFoundError):
    """The object does not exist (HTTP 404, ``NoSuchKey``, missing local file). Retrying cannot help."""


class RemoteAccessDeniedError(StorageError, PermissionError):
    """The store refused the request (HTTP 403, ``AccessDenied``). Retrying cannot help."""


class TransientStorageError(StorageError):
    """A failure that may pass: 5xx, throttling, timeouts, connection resets, truncated bodies."""


class ThrottledError(TransientStorageError):
    """The store refused the request for its rate (HTTP 429, S3 ``SlowDown``, Azure ``ServerBusy``).

    Not a failed attempt: ``call_with_retries`` waits (``wait`` seconds where the store said how long,
    from ``Retry-After`` or ``RateLimit``; else by the node's adapted request rate) and tries again, up
    to ``throttle_deadline``.
    """

    def __init__(self, message: str, *, wait: float | None = None) -> None:
        super().__init__(message)
        self.wait = wait  # pickled with the instance's __dict__ (BaseException.__reduce__)


class RetriesExhaustedError(StorageError):
    """Every attempt of a retried operation failed with a transient error; ``__cause__`` is the last one."""


class ThrottledTooLongError(RetriesExhaustedError):
    """The store kept refusing an operation for its rate past ``throttle_deadline``."""


@runtime_checkable
class ObjectStore(Protocol):
    """A flat key → bytes store rooted at ``url``; keys are ``/``-separated and relative to the root.

    Implementations map their failures onto ``RemoteNotFoundError``, ``RemoteAccessDeniedError`` and
    ``TransientStorageError``; they never retry on their own (``call_with_retries`` owns retrying so
    that attempt counts are exact). A ``timeout`` bounds one attempt, not the whole operation; for a
    download it bounds the whole attempt, not each socket read (see ``storage.deadline``).

    Optional, outside the protocol: ``delete(key)``, which a writer needs to overwrite a remote
    dataset (``exist_ok=True``): its old index.json is deleted before the first new shard. And the
    ranged reads of :class:`RangedStore` (``object_info``, ``read_range``, and optionally
    ``read_range_and_info``), which Parquet datasets need: a shard of one is a byte range of a file.
    """

    url: str

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        """Write the object to ``dest`` (a temporary path the caller renames); return bytes written.

        A body shorter than announced raises ``TransientStorageError``, never a silent success.
        """
        ...

    def upload(self, src: str | os.PathLike[str], key: str) -> None:
        """Store the local file ``src`` under ``key``; readers never see a partial object."""
        ...

    def read_bytes(self, key: str, *, timeout: float | None = None) -> bytes:
        """Return the whole object; meant for small files such as ``index.json``."""
        ...

    def exists(self, key: str) -> bool:
        """Whether an object is stored under exactly ``key``."""
        ...

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix`` (relative to the root), sorted."""
        ...

    def identity(self, key: str, *, timeout: float | None = None) -> str | None:
        """An opaque string that changes whenever the object under ``key`` is rewritten (ETag plus
        last-modified time, or a generation number); None when the store gives no such information."""
        ...


@dataclass(frozen=True)
class ObjectInfo:
    """What a store says of one object without reading it: its size, and its ``identity`` (see
    ``ObjectStore.identity``; None where the store gives none)."""

    size: int
    identity: str | None


@runtime_checkable
class RangedStore(Protocol):
    """A store that reads part of an object: what Parquet datasets need (a shard is a byte range).

    Both methods raise the error classes above and never retry on their own, as ``ObjectStore`` does.
    """

    def object_info(self, key: str, *, timeout: float | None = None) -> ObjectInfo:
        """The object's size and identity (one HEAD, ``stat`` or metadata request)."""
        ...

    def read_range(self, key: str, start: int, end: int, *, timeout: float | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object; a body of another length is a ``TransientStorageError``.

        ``0 <= start <= end <= size`` is the caller's duty; an empty range returns ``b""`` with no request.
        """
        ...


def range_and_info_reader(store: RangedStore) -> Callable[..., tuple[bytes, ObjectInfo]] | None:
    """The store's ``read_range_and_info(key, start, end, *, timeout)``, or None where it has none.

    Optional, outside ``RangedStore``: a store whose ranged GET also answers the object's size and
    identity (S3's ``Content-Range`` and ETag) offers it, so that a reader that must check an object
    before trusting its bytes (a Parquet shard) needs no HEAD. Without it: ``object_info``, then reads.
    """
    found = getattr(store, "read_range_and_info", None)
    return found if callable(found) else None


def range_total(content_range: str | None) -> int | None:
    """The object's size from a ranged answer's ``Content-Range`` (``bytes 0-9/1234`` → 1234); None where
    the header is missing or gives no size (``bytes 0-9/*``)."""
    total = (content_range or "").rpartition("/")[2].strip()
    return int(total) if total.isdigit() else None


def answered_size(status: int, content_range: str | None, received: int) -> int | None:
    """The object's size from an HTTP answer to a ranged GET: a 206's ``Content-Range`` total
    (``range_total``), or, for a 200 (a server that sent the whole object), the ``received`` bytes."""
    return range_total(content_range) if status == 206 else received


def ranged(store: object, url: str) -> RangedStore:
    """``store`` as a :class:`RangedStore`, or a ``StorageError`` naming the store and what it lacks."""
    if isinstance(store, RangedStore):
        return store
    raise StorageError(
        f"Expected a store that reads byte ranges (object_info and read_range) for {url!r}, found "
        f"{type(store).__name__} without them; Parquet datasets read shards as byte ranges: use a built-in "
        "store (local, s3, gs, azure, http(s), hf) or add both methods to the plugin's store."
    )


def store_identity(store: object, key: str, *, timeout: float | None = None) -> str | None:
    """``store.identity(key)``, or None for a store without that method (third-party plugins)."""
    identity = getattr(store, "identity", None)
    if identity is None:
        return None
    found = identity(key, timeout=timeout)
    return None if found is None else str(found)


def check_complete(source: str, announced: int | str | None, received: int) -> None:
    """A body shorter (or longer) than the store announced is a ``TransientStorageError``: retry it.

    ``announced`` is the size the store gave (a header may arrive as a string); None: it gave none.
    """
    if announced is not None and received != int(announced):
        raise TransientStorageError(
            f"Expected {announced} bytes from {source}, found {received} (truncated body); will retry."
        )


def join_key(*parts: str) -> str:
    """Join key segments with single ``/``; empty segments vanish (``join_key("a/", "", "/b")`` → ``a/b``)."""
    pieces = [piece.strip("/") for piece in parts]
    return "/".join(piece for piece in pieces if piece)


def check_key(key: str, url: str) -> str:
    """Return ``key`` stripped of leading ``/``; reject keys that would escape the store root."""
    relative = key.lstrip("/")
    if any(segment == ".." for segment in relative.split("/")):
        raise StorageError(
            f"Expected a key inside {url!r}, found {key!r} with a '..' segment; pass a path relative to the store root."
        )
    return relative
