"""``identity`` changes when an object is rewritten; ``download_timeout`` bounds a whole attempt."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from support.fault_proxy import FaultProxy
from support.s3_server import S3Bucket

from stream_plugin.storage import HttpStore, LocalStore, RemoteNotFoundError, S3Store, TransientStorageError
from stream_plugin.storage.base import store_identity

DRIPPED = os.urandom(64 * 1024)  # ~32 s at 2 KB/s: only the deadline can end the attempt early
TIMEOUT = 0.5


def test_local_identity_changes_when_the_file_is_rewritten_with_the_same_bytes(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    (tmp_path / "index.json").write_bytes(b"{}")
    first = store.identity("index.json")
    replacement = tmp_path / "new"
    replacement.write_bytes(b"{}")
    os.replace(replacement, tmp_path / "index.json")
    assert first is not None and store.identity("index.json") not in (None, first)
    with pytest.raises(RemoteNotFoundError):
        store.identity("absent.json")


def test_s3_identity_changes_when_the_object_is_rewritten_with_the_same_bytes(
    s3_store: S3Store, s3_bucket: S3Bucket
) -> None:
    s3_bucket.put("root/index.json", b"{}")
    first = s3_store.identity("index.json")
    time.sleep(1.05)  # Last-Modified has whole seconds; an identical body keeps the ETag.
    s3_bucket.put("root/index.json", b"{}")
    assert first is not None and "etag=" in first
    assert s3_store.identity("index.json") != first


def test_http_identity_follows_last_modified(http_root: tuple[Path, str]) -> None:
    folder, url = http_root
    (folder / "index.json").write_bytes(b"{}")
    os.utime(folder / "index.json", (1_000_000, 1_000_000))
    store = HttpStore(url)
    first = store.identity("index.json")
    os.utime(folder / "index.json", (2_000_000, 2_000_000))
    assert first is not None and store.identity("index.json") != first


def test_a_store_without_identity_counts_as_none() -> None:
    class Plain:
        url = "mem://x"

    assert store_identity(Plain(), "index.json") is None


def test_s3_download_timeout_bounds_a_whole_dripping_attempt(
    s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path
) -> None:
    s3_bucket.put("root/slow.bin", DRIPPED)
    proxy.bandwidth = 2048
    started = time.perf_counter()
    with pytest.raises(TransientStorageError, match=r"finish within download_timeout=0\.5s .*raise download_timeout"):
        proxied_store.download("slow.bin", tmp_path / "out", timeout=TIMEOUT)
    assert time.perf_counter() - started < TIMEOUT * 6


def test_http_download_timeout_bounds_a_whole_dripping_attempt(
    http_root: tuple[Path, str], tmp_path: Path
) -> None:
    folder, url = http_root
    (folder / "slow.bin").write_bytes(DRIPPED)
    host, port = url.removeprefix("http://").split(":")
    with FaultProxy((host, int(port)), bandwidth=2048) as proxy:
        store = HttpStore(proxy.endpoint_url)
        started = time.perf_counter()
        with pytest.raises(TransientStorageError, match=r"finish within download_timeout=0\.5s"):
            store.download("slow.bin", tmp_path / "out", timeout=TIMEOUT)
        assert time.perf_counter() - started < TIMEOUT * 6
