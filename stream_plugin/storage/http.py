"""``HttpStore``: read-only access to a dataset published under an ``http(s)://`` URL.

Credentials come as users pass them to curl, requests and fsspec: a user name and password in the URL
(``https://alice:secret@host/ds``) are sent as Basic auth (an ``Authorization`` header given in
``headers`` wins), never as part of the request line; a query string on the remote
(``https://host/ds?token=...``, a presigned or SAS-style token) is carried to every object's URL
(``https://host/ds/index.json?token=...``). Neither is ever shown: messages, logs and ``repr()`` pass
``stream_plugin.redaction``, and urllib3's request log is filtered while this store is used.

Requests go through one ``urllib3.PoolManager`` per store and process, so downloads reuse open
connections (keep-alive) instead of opening one per request. urllib3 retries nothing itself (redirects
aside): ``call_with_retries`` owns retrying, as for every store.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import MaxRetryError

from stream_plugin.errors import ConfigError, StorageError
from stream_plugin.redaction import REDACTED_LIBRARY_LOGGERS, redact_loggers, redact_url
from stream_plugin.storage.base import (
    ObjectInfo,
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    ThrottledError,
    TransientStorageError,
    answered_size,
    check_complete,
    check_key,
)
from stream_plugin.storage.deadline import abort_response, attempt_deadline, deadline_error
from stream_plugin.storage.throttle_hints import requested_wait

CHUNK_SIZE = 1 << 20
TRANSIENT_STATUS = frozenset({408, 425, 429})
# Connections kept open per host: enough for a process's prefetch threads.
POOL_CONNECTIONS = 16
# Redirects are followed (a CDN or a release page may answer with one); nothing else is retried here.
_NO_RETRIES = urllib3.Retry(total=None, connect=0, read=0, status=0, other=0, redirect=5, raise_on_status=False)


class _Status(Exception):
    """An HTTP error status, raised inside ``_mapped_errors`` to be mapped to a storage error."""

    def __init__(self, code: int, reason: str | None, headers: Any = None) -> None:
        super().__init__(f"HTTP {code} {reason or ''}".rstrip())
        self.code = code
        self.headers = dict(headers or {})


def is_throttling(code: int, wait: float | None) -> bool:
    """429, or a 503 that names a wait (``Retry-After`` / ``RateLimit``): the store's rate limit."""
    return code == 429 or (code == 503 and wait is not None)


def header_identity(headers: Mapping[str, str]) -> str | None:
    """An object's identity from an answer's headers: ``ETag`` and ``Last-Modified``; None without both."""
    etag, modified = headers.get("ETag"), headers.get("Last-Modified")
    if etag is None and modified is None:
        return None
    return f"etag={etag} modified={modified}"


def split_credentials(url: str) -> tuple[str, str, str | None]:
    """``url`` as (base URL without user info or query, query string, ``"user:password"`` or None)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"Expected an http(s) URL like 'https://host/dataset', found {redact_url(url)!r}; check the remote."
        )
    host = parts.netloc.rpartition("@")[2]
    basic_auth = None
    if parts.username is not None:
        basic_auth = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return urlunsplit((parts.scheme, host, parts.path, "", "")), parts.query, basic_auth


class HttpStore:
    """An ``ObjectStore`` that reads ``<url>/<key>`` with GET/HEAD; it cannot upload or list."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = dict(headers or {})
        self._base, self._query, basic_auth = split_credentials(url)
        if basic_auth is not None and not any(name.lower() == "authorization" for name in self.headers):
            self.headers.update(urllib3.make_headers(basic_auth=basic_auth))
        redact_loggers(REDACTED_LIBRARY_LOGGERS)
        self._pool_lock = threading.Lock()
        self._pool_and_pid: tuple[urllib3.PoolManager, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Connections and locks stay in the process that opened them; a copy opens its own.
        return {"url": self.url, "headers": self.headers}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], headers=state["headers"])  # type: ignore[misc]

    def _pool(self) -> urllib3.PoolManager:
        """This process's connection pool (a forked child must not share its parent's sockets)."""
        with self._pool_lock:
            if self._pool_and_pid is None or self._pool_and_pid[1] != os.getpid():
                pool = urllib3.PoolManager(maxsize=POOL_CONNECTIONS, retries=_NO_RETRIES)
                self._pool_and_pid = (pool, os.getpid())
            return self._pool_and_pid[0]

    def __repr__(self) -> str:
        return f"HttpStore({redact_url(self.url)!r})"

    def url_of(self, key: str) -> str:
        """The URL serving ``key`` (path segments percent-encoded), with the remote's query string."""
        path = f"{self._base.rstrip('/')}/{quote(check_key(key, self.url))}"
        return f"{path}?{self._query}" if self._query else path

    @contextmanager
    def _mapped_errors(self, url: str, action: str) -> Iterator[None]:
        """Turn urllib3 failures and error statuses into the storage error classes, naming the URL."""
        try:
            yield
        except _Status as error:
            found = str(error)
            if error.code == 404 or error.code == 410:
                raise RemoteNotFoundError(
                    f"Expected {url} to exist to {action} it, found {found}; check the path."
                ) from error
            if error.code in (401, 403):
                raise RemoteAccessDeniedError(
                    f"Expected access to {action} {url}, found {found}; check the credentials (headers) and the URL."
                ) from error
            named = requested_wait(error.headers)
            if is_throttling(error.code, named):
                raise ThrottledError(
                    f"Expected to {action} {url}, found {found} (the store's rate limit"
                    + ("" if named is None else f"; it asks for {named:g}s")
                    + "); waiting, then trying again.",
                    wait=named,
                ) from error
            if error.code >= 500 or error.code in TRANSIENT_STATUS:
                raise TransientStorageError(
                    f"Expected to {action} {url}, found {found}; will retry."
                ) from error
            raise StorageError(f"Expected to {action} {url}, found {found}; check the URL.") from error
        except (Urllib3Error, ConnectionError, TimeoutError) as error:
            # Refused connections and DNS failures, timeouts, resets and short bodies (IncompleteRead).
            cause = error.reason if isinstance(error, MaxRetryError) and error.reason is not None else error
            raise TransientStorageError(
                f"Expected to {action} {url}, found {type(cause).__name__}: {cause}; will retry. "
                f"If it persists, check the host and network."
            ) from error

    @contextmanager
    def _response(
        self, url: str, method: str, timeout: float | None, headers: Mapping[str, str] | None = None
    ) -> Iterator[Any]:
        """Send one request; an error status raises ``_Status``. The connection goes back to the pool,
        read to the end first (an error's body too: a kept-alive connection with an unread answer
        would fail the next request sent on it)."""
        response = self._pool().request(
            method,
            url,
            headers=self.headers if headers is None else {**self.headers, **headers},
            timeout=urllib3.Timeout(connect=timeout, read=timeout),
            preload_content=False,
        )
        try:
            if response.status >= 400:
                response.drain_conn()
                raise _Status(response.status, response.reason, response.headers)
            yield response
        finally:
            response.release_conn()

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        """GET the object into ``dest``; a body shorter than ``Content-Length`` is transient."""
        url = self.url_of(key)
        started = time.monotonic()
        written = 0
        with (
            self._mapped_errors(url, "download"),
            self._response(url, "GET", timeout) as response,
            open(dest, "wb") as handle,
        ):
            announced = response.headers.get("Content-Length")
            remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            with attempt_deadline(remaining, lambda: abort_response(response)) as expired:
                try:
                    while chunk := response.read(CHUNK_SIZE):
                        handle.write(chunk)
                        written += len(chunk)
                except Exception as error:
                    if expired():
                        raise deadline_error(url, timeout or 0.0, written) from error
                    raise
            if expired() and (announced is None or written != int(announced)):
                raise deadline_error(url, timeout or 0.0, written)
        check_complete(url, announced, written)
        return written

    def upload(self, src: str | os.PathLike[str], key: str) -> None:
        """Always fails: plain HTTP has no standard upload."""
        raise StorageError(
            f"Expected a writable store for {key!r}, found the read-only http(s) store {self.url!r}; "
            f"write to a local path or s3:// URL and publish it over HTTP separately."
        )

    def read_bytes(self, key: str, *, timeout: float | None = None) -> bytes:
        """GET the whole object."""
        url = self.url_of(key)
        with self._mapped_errors(url, "read"), self._response(url, "GET", timeout) as response:
            announced = response.headers.get("Content-Length")
            data: bytes = response.read()
        check_complete(url, announced, len(data))
        return data

    def exists(self, key: str, *, timeout: float | None = 60.0) -> bool:
        """HEAD the object: 404 → False."""
        url = self.url_of(key)
        try:
            with self._mapped_errors(url, "check"), self._response(url, "HEAD", timeout):
                return True
        except RemoteNotFoundError:
            return False

    def identity(self, key: str, *, timeout: float | None = None) -> str | None:
        """``ETag`` and ``Last-Modified`` from a HEAD; None when the server sends neither."""
        url = self.url_of(key)
        with self._mapped_errors(url, "check"), self._response(url, "HEAD", timeout) as response:
            return header_identity(response.headers)

    def object_info(self, key: str, *, timeout: float | None = None) -> ObjectInfo:
        """The object's size (``Content-Length``) and ``identity`` from one HEAD."""
        url = self.url_of(key)
        with self._mapped_errors(url, "check"), self._response(url, "HEAD", timeout) as response:
            length = response.headers.get("Content-Length")
            identity = header_identity(response.headers)
        if length is None:
            raise StorageError(
                f"Expected a Content-Length in the answer to HEAD {url}, found none; ranged reads need the "
                f"object's size: serve the file from a server that sends it (any static file server does)."
            )
        return ObjectInfo(int(length), identity)

    def read_range(self, key: str, start: int, end: int, *, timeout: float | None = None) -> bytes:
        """Bytes ``[start, end)`` (one GET with ``Range``); a body of another length is transient, and a
        server that ignores ``Range`` (200 with the whole object) is refused."""
        if end <= start:
            return b""
        return self._get_range(key, start, end, timeout)[0]

    def read_range_and_info(
        self, key: str, start: int, end: int, *, timeout: float | None = None
    ) -> tuple[bytes, ObjectInfo]:
        """Bytes ``[start, end)`` and ``object_info``'s answer from the same GET: the size from its
        ``Content-Range`` total (a 200 of the whole object: its ``Content-Length``), the identity from its
        ``ETag`` and ``Last-Modified``, as a HEAD gives them. A server that gives no total
        (``bytes 0-9/*``) is asked with a HEAD."""
        assert start < end, "an empty range makes no request; the caller asks object_info instead"
        data, status, headers = self._get_range(key, start, end, timeout)
        total = answered_size(status, headers.get("Content-Range"), len(data))
        if total is None:
            return data, self.object_info(key, timeout=timeout)
        return data, ObjectInfo(total, header_identity(headers))

    def _get_range(self, key: str, start: int, end: int, timeout: float | None) -> tuple[bytes, int, Mapping[str, str]]:
        url = self.url_of(key)
        wanted = {"Range": f"bytes={start}-{end - 1}"}
        with self._mapped_errors(url, "read"), self._response(url, "GET", timeout, wanted) as response:
            whole = response.status == 200 and start == 0 and response.headers.get("Content-Length") == str(end)
            if response.status != 206 and not whole:
                response.close()  # the whole object may follow: drop the connection rather than read it
                raise StorageError(
                    f"Expected HTTP 206 (Partial Content) to a ranged GET of {url}, found HTTP {response.status}: "
                    f"the server ignores Range headers; serve the files from a server that supports them."
                )
            data: bytes = response.read()
        check_complete(f"{url} [{start}, {end})", end - start, len(data))
        return data, response.status, response.headers

    def list(self, prefix: str = "") -> list[str]:
        """Always fails: HTTP servers have no standard listing."""
        raise StorageError(
            f"Expected a listable store, found the http(s) store {self.url!r}, which cannot list keys; "
            f"read index.json for the file names instead."
        )
