"""Loopback HTTP servers that guard a folder with a credential, as a user's private dataset host would.

``serve_basic_auth(folder, user, password)`` answers 401 (with ``WWW-Authenticate``) to a request
without the right ``Authorization: Basic`` header; ``serve_query_token(folder, token)`` answers 403 to
a request whose query lacks ``token=<token>``. Both serve GET and HEAD from ``folder`` (with
``Last-Modified``, so a rewritten file has a new identity) and record every request they see
(``AuthServer.requests``: the request line and headers), so a test can check what went over the wire:
that the credential was sent the right way, and to which paths.

Nothing is printed: ``http.server`` would log each request line (with its query) to stderr, and the
tests that use these servers look for secrets on stderr.
"""

from __future__ import annotations

import base64
import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class SeenRequest:
    """One request as the server received it."""

    line: str  # "GET /ds/index.json?token=... HTTP/1.1"
    method: str
    path: str  # the target with its query
    headers: dict[str, str]
    granted: bool  # whether the credential was right

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case), or None."""
        return next((value for key, value in self.headers.items() if key.lower() == name.lower()), None)


@dataclass
class AuthServer:
    """A running server: its base ``url`` (no credential in it) and what it has seen."""

    host: str
    port: int
    folder: Path
    requests: list[SeenRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def seen(self) -> list[SeenRequest]:
        """A copy of the requests so far (the server thread appends to the live list)."""
        with self._lock:
            return list(self.requests)

    def record(self, request: SeenRequest) -> None:
        with self._lock:
            self.requests.append(request)


class _GuardedHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the folder when ``granted()`` says the request carries the credential."""

    server_record: AuthServer

    def granted(self) -> bool:
        raise NotImplementedError

    def refuse(self) -> None:
        raise NotImplementedError

    def _guarded(self, serve: Any) -> None:
        allowed = self.granted()
        self.server_record.record(
            SeenRequest(
                line=self.requestline,
                method=self.command,
                path=self.path,
                headers=dict(self.headers.items()),
                granted=allowed,
            )
        )
        if allowed:
            serve()
        else:
            self.refuse()

    def do_GET(self) -> None:
        self._guarded(super().do_GET)

    def do_HEAD(self) -> None:
        self._guarded(super().do_HEAD)

    def _empty(self, status: int, *headers: tuple[str, str]) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  (stdlib signature)
        pass


class _BasicAuthHandler(_GuardedHandler):
    expected_authorization: str

    def granted(self) -> bool:
        return self.headers.get("Authorization") == self.expected_authorization

    def refuse(self) -> None:
        self._empty(401, ("WWW-Authenticate", 'Basic realm="datasets"'))


class _QueryTokenHandler(_GuardedHandler):
    token: str

    def granted(self) -> bool:
        return parse_qs(urlsplit(self.path).query).get("token") == [self.token]

    def refuse(self) -> None:
        self._empty(403)


@contextmanager
def _serving(handler: type[_GuardedHandler], folder: Path, **attributes: Any) -> Iterator[AuthServer]:
    record = AuthServer("127.0.0.1", 0, folder)  # the port is known once the server is bound
    bound = type(handler.__name__, (handler,), {"server_record": record, **attributes})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(bound, directory=str(folder))
    )
    server.daemon_threads = True
    record.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield record
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def basic_authorization(user: str, password: str) -> str:
    """The ``Authorization`` header value that Basic auth sends for ``user:password``."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


@contextmanager
def serve_basic_auth(folder: Path, user: str, password: str) -> Iterator[AuthServer]:
    """Serve ``folder`` on loopback to requests with Basic auth ``user:password``; 401 to the rest."""
    with _serving(
        _BasicAuthHandler, folder, expected_authorization=basic_authorization(user, password)
    ) as running:
        yield running


@contextmanager
def serve_query_token(folder: Path, token: str) -> Iterator[AuthServer]:
    """Serve ``folder`` on loopback to requests whose query has ``token=<token>``; 403 to the rest."""
    with _serving(_QueryTokenHandler, folder, token=token) as running:
        yield running
