"""HttpStore against a loopback http.server (and the fault proxy in front of it)."""

from __future__ import annotations

import functools
import http.server
import pickle
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fault_proxy import FaultKind, FaultProxy, FaultRule

from stream_plugin.errors import StorageError
from stream_plugin.storage import (
    HttpStore,
    RemoteNotFoundError,
    RetryPolicy,
    TransientStorageError,
    call_with_retries,
)

PAYLOAD = bytes(range(256)) * 400

# Short enough that stall tests take well under a second, long enough for a loaded 2-core runner.
TIMEOUT = 0.5
FAST_RETRIES = RetryPolicy(attempts=4, timeout=TIMEOUT, base_delay=0.0, max_delay=0.0, jitter=0.0)


@pytest.fixture
def site(http_root: tuple[Path, str]) -> tuple[Path, HttpStore]:
    folder, url = http_root
    (folder / "data").mkdir()
    (folder / "data" / "shard 0.bin").write_bytes(PAYLOAD)
    (folder / "index.json").write_bytes(b'{"version": 2}')
    return folder, HttpStore(url)


def test_download_read_and_exists_over_http(site: tuple[Path, HttpStore], tmp_path: Path) -> None:
    _, store = site
    assert store.download("data/shard 0.bin", tmp_path / "out", timeout=5) == len(PAYLOAD)
    assert (tmp_path / "out").read_bytes() == PAYLOAD
    assert store.read_bytes("index.json", timeout=5) == b'{"version": 2}'
    assert store.exists("index.json")
    assert not store.exists("absent.json")


def test_missing_object_is_not_found_naming_the_url(site: tuple[Path, HttpStore], tmp_path: Path) -> None:
    _, store = site
    pattern = rf"{store.url}/absent\.bin .*HTTP 404.*check the path"
    with pytest.raises(RemoteNotFoundError, match=pattern):
        store.download("absent.bin", tmp_path / "out")
    with pytest.raises(RemoteNotFoundError, match=pattern):
        store.read_bytes("absent.bin")


def test_upload_and_list_say_http_is_read_only(site: tuple[Path, HttpStore], tmp_path: Path) -> None:
    _, store = site
    with pytest.raises(
        StorageError, match=r"found the read-only http\(s\) store .*write to a local path or s3://"
    ):
        store.upload(tmp_path / "x", "x")
    with pytest.raises(StorageError, match="cannot list keys; read index.json"):
        store.list()


def test_refused_connection_is_transient() -> None:
    with socket.socket() as probe:  # A port that was just free and has no listener: connecting is refused.
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = HttpStore(f"http://127.0.0.1:{port}")
    with pytest.raises(
        TransientStorageError,
        match=rf"http://127\.0\.0\.1:{port}/k, found NewConnectionError.*Connection refused.*check the host and network",
    ):
        store.read_bytes("k", timeout=TIMEOUT)


@pytest.mark.parametrize("fault", ["http_503", "reset", "truncate", "stall"])
def test_faults_in_front_of_http_are_retried_until_intact(
    fault: FaultKind, http_root: tuple[Path, str], site: tuple[Path, HttpStore], tmp_path: Path
) -> None:
    host, port = http_root[1].removeprefix("http://").split(":")
    with FaultProxy((host, int(port)), [FaultRule(fault, limit=1)], stall_seconds=2.0) as proxy:
        store = HttpStore(proxy.endpoint_url)
        retried: list[BaseException] = []
        written = call_with_retries(
            lambda: store.download("data/shard 0.bin", tmp_path / "out", timeout=TIMEOUT),
            FAST_RETRIES,
            describe="download",
            on_retry=lambda attempt, error: retried.append(error),
        )
        assert proxy.injected[fault] == len(retried) == 1
    assert written == len(PAYLOAD)
    assert (tmp_path / "out").read_bytes() == PAYLOAD


def test_truncated_http_body_is_detected(
    http_root: tuple[Path, str], site: tuple[Path, HttpStore], tmp_path: Path
) -> None:
    host, port = http_root[1].removeprefix("http://").split(":")
    with FaultProxy((host, int(port)), [FaultRule("truncate")]) as proxy:
        store = HttpStore(proxy.endpoint_url)
        with pytest.raises(TransientStorageError):
            store.download("data/shard 0.bin", tmp_path / "out", timeout=TIMEOUT)
        with pytest.raises(TransientStorageError):
            store.read_bytes("data/shard 0.bin", timeout=TIMEOUT)


class _KeepAliveHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files over HTTP/1.1 keep-alive and records the client port of every request."""

    protocol_version = "HTTP/1.1"
    client_ports: list[int]

    def log_message(self, format: str, *args: object) -> None:
        self.client_ports.append(self.client_address[1])


@pytest.fixture
def keep_alive_site(tmp_path: Path) -> Iterator[tuple[str, list[int]]]:
    """``(base URL, client ports)`` of a loopback HTTP/1.1 server that keeps connections open."""
    (tmp_path / "shard.bin").write_bytes(PAYLOAD)
    ports: list[int] = []
    handler = type("Handler", (_KeepAliveHandler,), {"client_ports": ports})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(tmp_path))
    )
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", ports
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_downloads_reuse_one_connection(keep_alive_site: tuple[str, list[int]], tmp_path: Path) -> None:
    url, client_ports = keep_alive_site
    store = HttpStore(url)
    for attempt in range(5):
        assert store.download("shard.bin", tmp_path / f"out{attempt}", timeout=5) == len(PAYLOAD)
    assert store.read_bytes("shard.bin", timeout=5) == PAYLOAD
    assert store.exists("shard.bin")
    assert len(client_ports) == 7
    assert len(set(client_ports)) == 1  # every request came over the same TCP connection


def test_a_pickled_store_opens_its_own_connections(keep_alive_site: tuple[str, list[int]]) -> None:
    url, _ = keep_alive_site
    store = HttpStore(url, headers={"X-Token": "t"})
    assert store.read_bytes("shard.bin", timeout=5) == PAYLOAD
    copy = pickle.loads(pickle.dumps(store))
    assert (copy.url, copy.headers) == (url, {"X-Token": "t"})
    assert copy.read_bytes("shard.bin", timeout=5) == PAYLOAD


class _ThrottlingHandler(http.server.BaseHTTPRequestHandler):
    """Keeps connections alive; answers the first ``throttle`` GETs 429 with a body, then the payload."""

    protocol_version = "HTTP/1.1"
    throttle = 3
    served: list[int] = []  # the status of each answer, in order

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        throttled = sum(1 for status in self.served if status == 429) < self.throttle
        status, body = (429, b"slow down, please") if throttled else (200, PAYLOAD)
        self.served.append(status)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_error_answer_is_read_to_its_end_so_the_kept_alive_connection_serves_the_retry(tmp_path: Path) -> None:
    _ThrottlingHandler.served = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ThrottlingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    failures: list[BaseException] = []
    try:
        store = HttpStore(f"http://127.0.0.1:{server.server_address[1]}")
        size = call_with_retries(
            lambda: store.download("shard.bin", tmp_path / "out", timeout=5),
            FAST_RETRIES,
            describe="download shard.bin",
            on_retry=lambda attempt, error: failures.append(error),
        )
    finally:
        server.shutdown()
        server.server_close()
    assert size == len(PAYLOAD) and (tmp_path / "out").read_bytes() == PAYLOAD
    # Each 429 is waited out (no attempt); no attempt fails on a connection left with an unread answer.
    assert _ThrottlingHandler.served == [429, 429, 429, 200]
    assert failures == []
