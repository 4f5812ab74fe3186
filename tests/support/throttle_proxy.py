"""A throttling HTTP file server on loopback: a store with a set bandwidth, latency and request-rate limit.

It serves the files under ``root`` read-only at ``http://127.0.0.1:PORT/<group>/<path>``: the first path
segment names the client group (a simulated node: ``node0``, ``node1``) and is not part of the file's
path, so each node reads the same dataset through its own remote URL (``server.remote(group, "ds")``).

* ``bandwidth`` (bytes/s) is each group's: the bodies of all of a group's responses share it, chunk by
  chunk in turn (a token bucket without burst, so an idle group saves no credit; an answer whose
  thread woke late catches up, so a loaded machine does not slow the line).
* ``latency`` (s) passes between a request's arrival and its first byte, for every answer.
* ``rate_limit`` (requests/s) covers everything the server answers, all groups together (but the file
  kinds in ``unlimited``): a token bucket of ``burst`` requests refilled at that rate. A request that
  finds no token is answered 429 Too Many Requests (after the latency, like any answer), with
  ``Retry-After: <retry_after>`` where ``retry_after`` is set, else without, and its connection is
  closed. ``refusals`` records when each 429 went out (the monotonic clock every process shares), to
  whom and the wait it named. The bucket reads ``clock`` (``time.monotonic``); a test may
  pass one that ticks a fixed step per request (``ticks``), so which requests pass does not depend on
  how fast the machine sends them.

It counts per group: GETs answered with data (``gets``), 429 answers (``throttled``), body bytes sent
(``bytes``), by kind of file (``shard`` for ``shard.*`` files, ``index`` for ``index.json``, ``other``),
and chunks that queued behind another answer's on the group's line (``queued_chunks``). ``spans``
keeps each GET answered with data from its arrival to its last byte sent (which GETs were in flight at
once).
Connections are HTTP/1.1 keep-alive, as the http store's urllib3 pool expects.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

CHUNK = 16 * 1024  # bytes sent per turn of a group's bandwidth
SOCKET_TIMEOUT = 30.0  # bounds a stuck client; tests finish long before


@dataclass(frozen=True)
class Throttle:
    """The store's limits. ``None`` (and latency 0) is unlimited."""

    bandwidth: float | None = None  # bytes per second into each group
    latency: float = 0.0  # seconds from a request to its first byte
    rate_limit: float | None = None  # requests per second over all groups; more are answered 429
    burst: float = 1.0  # requests the rate limit lets through at once after an idle spell
    unlimited: frozenset[str] = frozenset()  # file kinds the rate limit lets through uncounted ("index")
    retry_after: int | None = None  # seconds a 429 names in Retry-After; None: no such header

    def __post_init__(self) -> None:
        for name in ("bandwidth", "rate_limit"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"Throttle.{name}: expected a positive number or None, found {value!r}")
        if self.latency < 0 or self.burst < 1:
            raise ValueError(
                f"Throttle: expected latency >= 0 and burst >= 1, found latency={self.latency!r}, "
                f"burst={self.burst!r}"
            )


def file_kind(path: str) -> str:
    """``shard`` (a ``shard.*`` file), ``index`` (``index.json``) or ``other``: how requests are counted."""
    name = PurePosixPath(path).name
    if name.startswith("shard."):
        return "shard"
    return "index" if name == "index.json" else "other"


def ticks(step: float) -> Callable[[], float]:
    """A clock for the rate limit that moves ``step`` seconds each time it is read (once a request)."""
    counter = itertools.count()
    return lambda: step * next(counter)


class _Pacer:
    """One group's bandwidth: each chunk reserves the next free slot of the line and finishes in it."""

    def __init__(self, bandwidth: float) -> None:
        self._bandwidth = bandwidth
        self._lock = threading.Lock()
        self._free_at = 0.0
        self.queued_chunks = 0  # chunks whose slot began after another answer's (more than half a slot)

    def finish_time(self, size: int, *, continuing: bool = False) -> float:
        """The monotonic time by which a chunk of ``size`` bytes, queued now, has gone out.

        A chunk ``continuing`` an answer starts where the line's last slot ended even when that is past
        (its thread woke late on a loaded machine): the answer catches up rather than slowing the line.
        """
        with self._lock:
            now = time.monotonic()
            duration = size / self._bandwidth
            # An answer's own next chunk is asked for once its last has gone out: it finds the line
            # free (to the sleep's precision); only another answer's chunk makes it queue.
            if self._free_at - now > duration / 2:
                self.queued_chunks += 1
            self._free_at = (self._free_at if continuing else max(now, self._free_at)) + duration
            return self._free_at


class _RateLimit:
    """A token bucket over every request: ``burst`` tokens, refilled at ``rate`` per second."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]) -> None:
        self._rate, self._burst, self._clock = rate, burst, clock
        self._tokens = burst
        self._stamp = clock()
        self._lock = threading.Lock()

    def admit(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
            self._stamp = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False


class ThrottleServer:
    """Serves ``root`` under ``/<group>/`` with the limits of ``throttle``; a context manager.
    ``clock`` is the rate limit's (see ``ticks``)."""

    def __init__(
        self, root: Path, throttle: Throttle = Throttle(), clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.root = root.resolve()
        self.throttle = throttle
        self.gets: Counter[tuple[str, str]] = Counter()  # (group, kind) -> GETs answered with data
        self.throttled: Counter[tuple[str, str]] = Counter()  # (group, kind) -> 429 answers
        self.bytes: Counter[tuple[str, str]] = Counter()  # (group, kind) -> body bytes sent
        self.log: list[tuple[float, str, str, str, int]] = []  # (arrival, group, method, path, status)
        self.refusals: list[tuple[float, str, int | None]] = []  # (429 sent, group, Retry-After named)
        self.spans: list[tuple[float, float, str, str]] = []  # (arrival, last byte sent, group, path) per GET
        self._lock = threading.Lock()
        self._pacers: dict[str, _Pacer] = {}
        rate_limit, burst = throttle.rate_limit, throttle.burst
        self._rate = None if rate_limit is None else _RateLimit(rate_limit, burst, clock)
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler, owner=self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="throttle-server",
            daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def remote(self, group: str, path: str = "") -> str:
        """The URL a client of ``group`` reads ``root/path`` from."""
        return f"http://127.0.0.1:{self.port}/{group}/{path}".rstrip("/")

    def start(self) -> ThrottleServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers that wait for latency or bandwidth
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> ThrottleServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def reset_counts(self) -> None:
        with self._lock:
            self.gets.clear()
            self.throttled.clear()
            self.bytes.clear()
            self.log.clear()
            self.refusals.clear()
            self.spans.clear()

    def count(self, counter: str, group: str, kind: str = "shard") -> int:
        """``gets``, ``throttled`` or ``bytes`` of ``group`` for files of ``kind``."""
        with self._lock:
            return int(getattr(self, counter)[group, kind])

    def queued_chunks(self, group: str) -> int:
        """Chunks of ``group``'s answers that waited for the line behind another answer's chunk."""
        pacer = self.pacer(group)
        return 0 if pacer is None else pacer.queued_chunks

    # --- used by the handler --------------------------------------------------------------------

    def admit(self, arrival: float, group: str, method: str, path: str) -> bool:
        rate = self._rate
        admitted = rate is None or file_kind(path) in self.throttle.unlimited or rate.admit()
        with self._lock:
            self.log.append((arrival, group, method, path, 200 if admitted else 429))
            if not admitted:
                self.throttled[group, file_kind(path)] += 1
        return admitted

    def record(self, group: str, path: str, *, answered: bool = False, sending: int = 0) -> None:
        """Count a GET answered with data, or bytes about to be sent (counted first, so that a client
        that has read everything finds every count in place)."""
        with self._lock:
            self.gets[group, file_kind(path)] += answered
            self.bytes[group, file_kind(path)] += sending

    def wait_until(self, moment: float) -> None:
        """Sleep until the monotonic ``moment``, waking at once when the server stops."""
        self._stopping.wait(max(0.0, moment - time.monotonic()))

    def pacer(self, group: str) -> _Pacer | None:
        if self.throttle.bandwidth is None:
            return None
        with self._lock:
            return self._pacers.setdefault(group, _Pacer(self.throttle.bandwidth))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, owner: ThrottleServer
    ):
        self.owner = owner
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every answer has a Content-Length
    server: _Server
    timeout = SOCKET_TIMEOUT

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  (the base class's name)
        pass  # quiet: the owner keeps its own log

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        owner = self.server.owner
        arrival = time.monotonic()
        group, path = self._split_target()
        admitted = owner.admit(arrival, group, self.command, path)
        owner.wait_until(arrival + owner.throttle.latency)
        if not admitted:
            retry_after = owner.throttle.retry_after
            with owner._lock:  # recorded before the answer goes out: the client's wait starts later
                owner.refusals.append((time.monotonic(), group, retry_after))
            self._send_empty(429, "Too Many Requests", close=True, retry_after=retry_after)
            return
        file = (owner.root / path).resolve()
        if not path or not file.is_file() or not file.is_relative_to(owner.root):
            self._send_empty(404, "Not Found")
            return
        data = file.read_bytes()
        if send_body:
            owner.record(group, path, answered=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if send_body:
            self._send_paced(group, path, data)
            with owner._lock:
                owner.spans.append((arrival, time.monotonic(), group, path))

    def _split_target(self) -> tuple[str, str]:
        """(group, file path under root) of the request target ``/<group>/<path>?query``."""
        parts = unquote(urlsplit(self.path).path).lstrip("/").split("/", 1)
        return parts[0], parts[1] if len(parts) > 1 else ""

    def _send_empty(self, status: int, reason: str, *, close: bool = False, retry_after: int | None = None) -> None:
        self.send_response(status, reason)
        self.send_header("Content-Length", "0")
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        if close:
            # The http store returns a connection to its pool after an error status without reading
            # the answer to its end, and urllib3 then fails the next request on it: closing the
            # connection keeps each 429 to exactly one failed attempt.
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()

    def _send_paced(self, group: str, path: str, data: bytes) -> None:
        owner = self.server.owner
        pacer = owner.pacer(group)
        view = memoryview(data)
        for start in range(0, len(data), CHUNK):
            piece = view[start : start + CHUNK]
            if pacer is not None:
                owner.wait_until(pacer.finish_time(len(piece), continuing=start > 0))
            owner.record(group, path, sending=len(piece))
            self.wfile.write(piece)
        self.wfile.flush()


@contextmanager
def throttle_server(root: Path, throttle: Throttle = Throttle()) -> Iterator[ThrottleServer]:
    """``with throttle_server(folder, Throttle(bandwidth=2e6)) as server:`` — started and stopped for you."""
    with ThrottleServer(root, throttle) as server:
        yield server
