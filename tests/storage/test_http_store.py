"""HttpStore against a loopback http.server (and the fault proxy in front of it)."""

from __future__ import annotations

import socket
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
        match=rf"http://127\.0\.0\.1:{port}/k, found URLError.*check the host and network",
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
