"""Fixtures for the storage tests: moto S3 (from the shared rig), a fault proxy in front of it, and
a loopback static HTTP server."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fault_proxy import FaultProxy
from support.s3_server import S3Bucket

from stream_plugin.storage import S3Store

# Stalls outlast every client timeout used in these tests (<= 0.5 s) many times over, so a loaded machine
# cannot make a client that does time out look like one that waited; a stall ends early when the client
# hangs up or the proxy stops, so the length costs nothing.
STALL_SECONDS = 10.0


@pytest.fixture
def s3_store(s3_bucket: S3Bucket) -> S3Store:  # noqa: F811
    """An S3Store rooted at ``s3://<fresh bucket>/root`` talking straight to moto."""
    return S3Store(s3_bucket.url("root"), endpoint_url=s3_bucket.endpoint_url)


@pytest.fixture
def proxy(s3_bucket: S3Bucket) -> Iterator[FaultProxy]:  # noqa: F811
    """A fault proxy in front of moto with no rules yet (add them with ``set_rules``)."""
    with FaultProxy((s3_bucket.server.host, s3_bucket.server.port), stall_seconds=STALL_SECONDS) as running:
        yield running


@pytest.fixture
def proxied_store(s3_bucket: S3Bucket, proxy: FaultProxy) -> S3Store:  # noqa: F811
    """An S3Store on the same bucket as ``s3_store`` but reaching moto through ``proxy``."""
    return S3Store(s3_bucket.url("root"), endpoint_url=proxy.endpoint_url)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  (stdlib signature)
        pass


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served read-only by ``http.server`` on loopback: ``(folder, base URL)``."""
    folder = tmp_path / "site"
    folder.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
