"""The cache folder records a remote without its credential, so a job whose token was rotated between
runs reads the same cache: nothing downloaded again, and no ``RemoteChangedError`` or refusal of a
"second remote" for the same data."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.datasets import write_ids
from support.secret_checks import read_ids

from stream_plugin.cache.stats import node_stats

SAMPLES = 40
OLD_TOKEN = "tok-Old-3b8e51c2"
NEW_TOKEN = "tok-New-a74d09f6"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the folder whatever the query string (it takes the old token and the rotated one)."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass


@pytest.fixture
def address(tmp_path: Path) -> Iterator[str]:
    site = tmp_path / "site"
    write_ids(site / "ds", range(SAMPLES), size_limit=1 << 10)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_rotated_token_reads_the_same_cache_without_downloading_again(address: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _, first = read_ids(f"http://{address}/ds?token={OLD_TOKEN}", cache)
    downloaded = node_stats(cache).shards_downloaded
    assert first == list(range(SAMPLES)) and downloaded > 1
    dataset, again = read_ids(f"http://{address}/ds?token={NEW_TOKEN}", cache)
    assert again == first
    assert node_stats(cache).shards_downloaded == downloaded
    state = str(dataset.state_dict())
    assert NEW_TOKEN not in state and OLD_TOKEN not in state
