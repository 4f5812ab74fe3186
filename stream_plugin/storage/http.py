"""``HttpStore``: read-only access to a dataset published under an ``http(s)://`` URL (urllib, no deps)."""

from __future__ import annotations

import http.client
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

from stream_plugin.errors import StorageError
from stream_plugin.storage.base import (
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    TransientStorageError,
    check_key,
)
from stream_plugin.storage.deadline import abort_response, attempt_deadline, deadline_error

CHUNK_SIZE = 1 << 20
TRANSIENT_STATUS = frozenset({408, 425, 429})


class HttpStore:
    """An ``ObjectStore`` that reads ``<url>/<key>`` with GET/HEAD; it cannot upload or list."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = dict(headers or {})

    def __repr__(self) -> str:
        return f"HttpStore({self.url!r})"

    def url_of(self, key: str) -> str:
        """The URL serving ``key`` (path segments percent-encoded)."""
        return f"{self.url.rstrip('/')}/{quote(check_key(key, self.url))}"

    @contextmanager
    def _mapped_errors(self, url: str, action: str) -> Iterator[None]:
        """Turn urllib failures into the storage error classes, naming the URL and what to check."""
        try:
            yield
        except urllib.error.HTTPError as error:
            found = f"HTTP {error.code} {error.reason}"
            if error.code == 404 or error.code == 410:
                raise RemoteNotFoundError(
                    f"Expected {url} to exist to {action} it, found {found}; check the path."
                ) from error
            if error.code in (401, 403):
                raise RemoteAccessDeniedError(
                    f"Expected access to {action} {url}, found {found}; check the credentials (headers) and the URL."
                ) from error
            if error.code >= 500 or error.code in TRANSIENT_STATUS:
                raise TransientStorageError(
                    f"Expected to {action} {url}, found {found}; will retry."
                ) from error
            raise StorageError(f"Expected to {action} {url}, found {found}; check the URL.") from error
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as error:
            # URLError wraps refused connections and DNS failures; HTTPException covers IncompleteRead.
            raise TransientStorageError(
                f"Expected to {action} {url}, found {type(error).__name__}: {error}; will retry. "
                f"If it persists, check the host and network."
            ) from error

    def _request(self, url: str, method: str = "GET") -> urllib.request.Request:
        return urllib.request.Request(url, headers=self.headers, method=method)

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        """GET the object into ``dest``; a body shorter than ``Content-Length`` is transient."""
        url = self.url_of(key)
        started = time.monotonic()
        written = 0
        with (
            self._mapped_errors(url, "download"),
            urllib.request.urlopen(self._request(url), timeout=timeout) as response,
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
        if announced is not None and written != int(announced):
            raise TransientStorageError(
                f"Expected {announced} bytes from {url}, found {written} (truncated body); will retry."
            )
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
        with (
            self._mapped_errors(url, "read"),
            urllib.request.urlopen(self._request(url), timeout=timeout) as response,
        ):
            announced = response.headers.get("Content-Length")
            data: bytes = response.read()
        if announced is not None and len(data) != int(announced):
            raise TransientStorageError(
                f"Expected {announced} bytes from {url}, found {len(data)} (truncated body); will retry."
            )
        return data

    def exists(self, key: str) -> bool:
        """HEAD the object: 404 → False."""
        url = self.url_of(key)
        try:
            with self._mapped_errors(url, "check"), urllib.request.urlopen(self._request(url, "HEAD")):
                return True
        except RemoteNotFoundError:
            return False

    def identity(self, key: str, *, timeout: float | None = None) -> str | None:
        """``ETag`` and ``Last-Modified`` from a HEAD; None when the server sends neither."""
        url = self.url_of(key)
        with (
            self._mapped_errors(url, "check"),
            urllib.request.urlopen(self._request(url, "HEAD"), timeout=timeout) as response,
        ):
            etag, modified = response.headers.get("ETag"), response.headers.get("Last-Modified")
        if etag is None and modified is None:
            return None
        return f"etag={etag} modified={modified}"

    def list(self, prefix: str = "") -> list[str]:
        """Always fails: HTTP servers have no standard listing."""
        raise StorageError(
            f"Expected a listable store, found the http(s) store {self.url!r}, which cannot list keys; "
            f"read index.json for the file names instead."
        )
