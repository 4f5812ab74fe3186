"""A fault-injecting HTTP proxy on loopback, to put between a client (boto3, urllib) and a real server.

Point the client's endpoint at ``proxy.endpoint_url``; the proxy forwards each request to the
upstream server and, when a :class:`FaultRule` fires, answers with a fault instead:

* ``http_500`` / ``http_503`` / ``http_403`` / ``http_404`` — an S3-style XML error response (the 503 is
  ``ServiceUnavailable``: an outage, a failed attempt);
* ``slow_down`` / ``http_429`` — throttling: S3's 503 ``SlowDown`` / a 429 ``TooManyRequests``, with
  ``Retry-After: 0``; ``server_busy`` — Azure's 503 ``ServerBusy``, with no ``Retry-After`` (none of
  them is a failed attempt);
* ``reset`` — the connection is closed with ``SO_LINGER 0`` (the client sees a TCP RST);
* ``stall`` — nothing is answered for ``stall_seconds`` (set it above the client's read timeout), or
  until the client hangs up: ``stalls`` records, by the proxy's own clock, whether and when it did;
* ``stall_body`` — headers and half the body are sent, then nothing for ``stall_seconds``;
* ``truncate`` — headers with the full ``Content-Length`` and half the body are sent, then a close.

Rules fire deterministically (``every`` n-th matching request, after ``skip`` of them, at most
``limit`` times) or at random (``fraction``, from a seeded generator). ``injected`` counts faults per
kind, so a test can assert "retries == faults". ``bandwidth`` (bytes/s) throttles every response body,
for crash-during-download tests.

Framing: every proxied response carries ``Connection: close`` and the proxy closes the connection
after it, so keep-alive clients simply open a new connection per request; request bodies are read by
``Content-Length`` (or chunked), and ``Expect: 100-continue`` is answered by the proxy itself.
"""

from __future__ import annotations

import random
import select
import socket
import socketserver
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO, Literal

FaultKind = Literal[
    "http_500", "http_503", "http_403", "http_404", "slow_down", "http_429", "server_busy", "reset", "stall", "stall_body", "truncate"
]
RequestKind = Literal["get", "head", "put", "post", "delete", "list", "other"]

ERROR_STATUS = {
    "http_500": (500, "Internal Server Error", "InternalError"),
    "http_503": (503, "Service Unavailable", "ServiceUnavailable"),
    "slow_down": (503, "Slow Down", "SlowDown"),
    "http_429": (429, "Too Many Requests", "TooManyRequests"),
    "server_busy": (503, "Server Busy", "ServerBusy"),
    "http_403": (403, "Forbidden", "AccessDenied"),
    "http_404": (404, "Not Found", "NoSuchKey"),
}
SOCKET_TIMEOUT = 30.0  # Bounds a stuck peer; tests finish long before.
RELAY_CHUNK = 64 * 1024


@dataclass
class FaultRule:
    """When to inject ``fault``: on requests of ``kinds`` whose path contains ``path_contains``.

    Among matching requests (counted from 1 after ``skip``), fires on every ``every``-th one, or, with
    ``every=None``, with probability ``fraction``; stops after ``limit`` injections.
    """

    fault: FaultKind
    kinds: frozenset[str] = frozenset({"get"})
    path_contains: str = ""
    every: int | None = 1
    fraction: float = 0.0
    skip: int = 0
    limit: int | None = None
    matched: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)

    def decide(self, kind: str, path: str, rng: random.Random) -> bool:
        """Count this request if it matches and say whether the fault fires (call under a lock)."""
        if kind not in self.kinds or self.path_contains not in path:
            return False
        self.matched += 1
        if self.matched <= self.skip or (self.limit is not None and self.fired >= self.limit):
            return False
        position = self.matched - self.skip
        fires = position % self.every == 0 if self.every is not None else rng.random() < self.fraction
        self.fired += fires
        return fires


@dataclass(frozen=True)
class Stall:
    """One ``stall`` fault, timed by the proxy: ``client_left`` is how long after the request arrived the
    client hung up, or None when it was still connected when the stall ended (or the proxy stopped)."""

    target: str
    client_left: float | None


def request_kind(method: str, target: str) -> RequestKind:
    """Classify an S3 (or GCS) request: a GET on a bucket (path-style ``/bucket?list-type=2``) is ``list``;
    a GCS metadata GET counts as ``head``."""
    path, _, query = target.partition("?")
    if method == "GET" and "/storage/v1/b/" in path:  # GCS's JSON API
        if path.rstrip("/").endswith("/o"):
            return "list"
        if "alt=media" not in query:
            return "head"  # an object's metadata (its generation): what a HEAD is to S3
    if method == "GET" and ("list-type" in query or path.strip("/").count("/") == 0):
        return "list"
    known: dict[str, RequestKind] = {
        "GET": "get",
        "HEAD": "head",
        "PUT": "put",
        "POST": "post",
        "DELETE": "delete",
    }
    return known.get(method, "other")


@dataclass
class _Head:
    """A parsed request or response head: the first line and ordered headers."""

    first_line: str
    headers: list[tuple[str, str]]

    def get(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def without(self, *names: str) -> list[tuple[str, str]]:
        lowered = {name.lower() for name in names}
        return [(key, value) for key, value in self.headers if key.lower() not in lowered]


def _encode_head(first_line: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [first_line, *(f"{key}: {value}" for key, value in headers), "", ""]
    return "\r\n".join(lines).encode("latin-1")


def _read_head(stream: BinaryIO) -> _Head | None:
    """Read up to the blank line; None on a clean EOF before any byte."""
    first = stream.readline(65536)
    if not first:
        return None
    headers = []
    while True:
        line = stream.readline(65536)
        if line in (b"\r\n", b"\n", b""):
            break
        key, _, value = line.decode("latin-1").partition(":")
        headers.append((key.strip(), value.strip()))
    return _Head(first.decode("latin-1").rstrip("\r\n"), headers)


def _hung_up(client: socket.socket) -> bool:
    """Whether a readable client socket was closed (end of file or reset) rather than sent more (which
    a stalled request has no use for: it is read and dropped)."""
    try:
        return client.recv(65536) == b""
    except OSError:
        return True


def _read_chunked(stream: BinaryIO) -> bytes:
    """Read a chunked body and return it de-chunked (trailers are dropped)."""
    body = bytearray()
    while True:
        size = int(stream.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while stream.readline() not in (b"\r\n", b"\n", b""):
                pass
            return bytes(body)
        body += stream.read(size)
        stream.readline()


def _error_body(code: str, path: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>Injected by the fault proxy</Message><Resource>{path}</Resource>"
        f"<RequestId>fault-proxy</RequestId></Error>"
    ).encode()


class FaultProxy:
    """A threaded loopback proxy to ``upstream`` (``host``, ``port``) that injects scripted faults.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. Rules can be replaced between
    phases of a test with :meth:`set_rules`; :meth:`reset_counts` zeroes the counters.
    """

    def __init__(
        self,
        upstream: tuple[str, int],
        rules: list[FaultRule] | tuple[FaultRule, ...] = (),
        *,
        seed: int = 0,
        stall_seconds: float = 5.0,
        bandwidth: float | None = None,
    ) -> None:
        self.upstream = upstream
        self.stall_seconds = stall_seconds
        self.bandwidth = bandwidth
        self.injected: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        self.log: list[tuple[str, str, str | None]] = []  # (method, target, fault or None)
        self.stalls: list[Stall] = []  # each finished ``stall`` fault, in the order they ended
        self._rules = list(rules)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stall_ended = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler, proxy=self)
        # A short poll interval makes stop() return in ~50 ms instead of the default 0.5 s.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fault-proxy", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # Wakes stalled and throttled handlers so shutdown is quick.
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def set_rules(self, *rules: FaultRule) -> None:
        """Replace the rules (their counters start from zero)."""
        with self._lock:
            self._rules = list(rules)

    def reset_counts(self) -> None:
        with self._lock:
            self.injected.clear()
            self.requests.clear()
            self.log.clear()
            self.stalls.clear()

    def finished_stalls(self, count: int, timeout: float = 30.0) -> list[Stall]:
        """The first ``count`` stalls, once that many have ended (the handler notices a hang-up within
        a poll of 50 ms); AssertionError if they have not within ``timeout`` seconds."""
        with self._stall_ended:
            ended = self._stall_ended.wait_for(lambda: len(self.stalls) >= count, timeout)
            assert ended, f"expected {count} stall(s) to end within {timeout} s, found {len(self.stalls)}"
            return self.stalls[:count]

    @property
    def total_injected(self) -> int:
        with self._lock:
            return sum(self.injected.values())

    # --- used by the handler --------------------------------------------------------------------

    def choose_fault(self, method: str, target: str) -> FaultKind | None:
        """Record the request and return the fault of the first rule that fires, if any."""
        kind = request_kind(method, target)
        with self._lock:
            self.requests[kind] += 1
            fault = next((rule.fault for rule in self._rules if rule.decide(kind, target, self._rng)), None)
            self.log.append((method, target, fault))
            return fault

    def count(self, fault: FaultKind) -> None:
        with self._lock:
            self.injected[fault] += 1

    def wait(self, seconds: float) -> None:
        """Sleep, but wake up at once when the proxy stops."""
        self._stopping.wait(seconds)

    def stall(self, client: socket.socket, target: str, arrival: float) -> None:
        """Answer nothing for ``stall_seconds``, or until the client hangs up or the proxy stops, and
        record which came first."""
        deadline = arrival + self.stall_seconds
        left: float | None = None
        while left is None and not self._stopping.is_set() and time.monotonic() < deadline:
            readable, _, _ = select.select([client], [], [], 0.05)
            if readable and _hung_up(client):
                left = time.monotonic() - arrival
        with self._stall_ended:
            self.stalls.append(Stall(target, left))
            self._stall_ended.notify_all()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], handler: type[socketserver.BaseRequestHandler], *, proxy: FaultProxy
    ):
        self.proxy = proxy
        super().__init__(address, handler)


class _Handler(socketserver.BaseRequestHandler):
    """One client connection: one request, one (possibly faulty) response, then close."""

    server: _Server

    def handle(self) -> None:
        proxy = self.server.proxy
        client: socket.socket = self.request
        client.settimeout(SOCKET_TIMEOUT)
        reader = client.makefile("rb")
        try:
            head = _read_head(reader)
            if head is None:
                return
            arrival = time.monotonic()
            method, target = head.first_line.split(" ")[:2]
            fault = proxy.choose_fault(method, target)
            if fault == "reset":
                proxy.count(fault)
                _reset(client)
                return
            if fault in ERROR_STATUS:
                proxy.count(fault)
                self._send_error(client, reader, head, fault, target)
                return
            if fault == "stall":
                proxy.count(fault)
                proxy.stall(client, target, arrival)
                return
            body = self._read_request_body(client, reader, head)
            self._forward(client, head, body, fault)
        except OSError:
            pass  # The client went away (often on purpose: it timed out); nothing to answer.
        finally:
            reader.close()

    def _read_request_body(self, client: socket.socket, reader: BinaryIO, head: _Head) -> bytes:
        if (head.get("Expect") or "").lower() == "100-continue":
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if (head.get("Transfer-Encoding") or "").lower() == "chunked":
            return _read_chunked(reader)
        return reader.read(int(head.get("Content-Length") or 0))

    def _send_error(
        self, client: socket.socket, reader: BinaryIO, head: _Head, fault: str, target: str
    ) -> None:
        # Drain the body first (unless the client waits for 100-continue): closing a socket with
        # unread input sends RST, and the client would see a reset instead of this status.
        if (head.get("Expect") or "").lower() != "100-continue":
            if (head.get("Transfer-Encoding") or "").lower() == "chunked":
                _read_chunked(reader)
            else:
                reader.read(int(head.get("Content-Length") or 0))
        status, reason, code = ERROR_STATUS[fault]
        body = _error_body(code, target)
        headers = [
            ("Content-Type", "application/xml"),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
        ]
        if code in ("SlowDown", "TooManyRequests"):
            headers.append(("Retry-After", "0"))
        if head.first_line.startswith("HEAD "):
            body = b""  # A HEAD answer announces the length but carries no body.
        client.sendall(_encode_head(f"HTTP/1.1 {status} {reason}", headers) + body)

    def _forward(self, client: socket.socket, head: _Head, body: bytes, fault: FaultKind | None) -> None:
        proxy = self.server.proxy
        headers = head.without("Connection", "Keep-Alive", "Expect", "Transfer-Encoding", "Content-Length")
        if body or head.get("Content-Length") is not None or head.get("Transfer-Encoding"):
            headers.append(("Content-Length", str(len(body))))
        headers.append(("Connection", "close"))
        with socket.create_connection(proxy.upstream, timeout=SOCKET_TIMEOUT) as upstream:
            upstream.sendall(_encode_head(head.first_line, headers) + body)
            upstream_reader = upstream.makefile("rb")
            try:
                response = _read_head(upstream_reader)
                while response is not None and response.first_line.split(" ")[1].startswith("1"):
                    response = _read_head(upstream_reader)  # Skip interim 1xx answers.
                if response is None:
                    return
                self._relay_response(client, head, response, upstream_reader, fault)
            finally:
                upstream_reader.close()

    def _relay_response(
        self,
        client: socket.socket,
        request: _Head,
        response: _Head,
        upstream: BinaryIO,
        fault: FaultKind | None,
    ) -> None:
        proxy = self.server.proxy
        status = response.first_line.split(" ")[1]
        has_body = not request.first_line.startswith("HEAD ") and status not in ("204", "304")
        length_text = response.get("Content-Length")
        length = int(length_text) if length_text is not None else None
        client.sendall(
            _encode_head(
                response.first_line, [*response.without("Connection", "Keep-Alive"), ("Connection", "close")]
            )
        )
        if not has_body:
            return
        # The body: exactly Content-Length bytes, else (chunked or unframed) everything until EOF.
        cut = None
        if fault in ("truncate", "stall_body") and length:
            cut = length // 2
            proxy.count(fault)
        sent = 0
        while length is None or sent < length:
            want = RELAY_CHUNK if length is None else min(RELAY_CHUNK, length - sent)
            if cut is not None:
                want = min(want, cut - sent)
            if want <= 0:
                break
            chunk = upstream.read(want) if length is not None else upstream.read1(want)  # type: ignore[attr-defined]
            if not chunk:
                break
            self._send_throttled(client, chunk)
            sent += len(chunk)
        if cut is not None and fault == "stall_body":
            proxy.wait(proxy.stall_seconds)

    def _send_throttled(self, client: socket.socket, data: bytes) -> None:
        proxy = self.server.proxy
        if proxy.bandwidth is None:
            client.sendall(data)
            return
        # Send in slices of ~1/20 s worth of bytes so the rate is smooth at any bandwidth.
        step = max(1, int(proxy.bandwidth / 20))
        for start in range(0, len(data), step):
            piece = data[start : start + step]
            client.sendall(piece)
            proxy.wait(len(piece) / proxy.bandwidth)


def _reset(client: socket.socket) -> None:
    """Close with SO_LINGER 0: the kernel sends RST instead of FIN."""
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()


@contextmanager
def fault_proxy(
    upstream: tuple[str, int], *rules: FaultRule, **options: float | int | None
) -> Iterator[FaultProxy]:
    """``with fault_proxy((host, port), FaultRule("http_503")) as proxy:`` — started and stopped for you."""
    proxy = FaultProxy(upstream, rules, **options)  # type: ignore[arg-type]
    with proxy:
        yield proxy
