"""Ranged reads (``object_info``, ``read_range``) of every built-in store, against real loopback servers:
moto (S3, and GCS's HMAC path), the GCS emulator, Azurite, a static HTTP server and fsspec."""

from __future__ import annotations

import functools
import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.azure_server import AzureContainer
from support.fault_proxy import FaultProxy, FaultRule
from support.gcs_server import GcsBucket
from support.ranged_http import RangedFileHandler
from support.s3_server import S3Bucket

from stream_plugin.errors import StorageError
from stream_plugin.storage import (
    FsspecStore,
    HttpStore,
    RemoteNotFoundError,
    S3Store,
    TransientStorageError,
    open_store,
)
from stream_plugin.storage.base import ObjectInfo, RangedStore, ranged
from stream_plugin.storage.gcs_hmac import GcsHmacStore

PAYLOAD = os.urandom(3000)


def check_ranged_reads(store: object, key: str = "data/part.parquet") -> None:
    """The contract every store keeps: exact bytes, the size and the identity ``identity()`` reports,
    an empty range without a request, and a missing key that is ``RemoteNotFoundError``."""
    reader = ranged(store, "test")
    assert reader.read_range(key, 0, len(PAYLOAD)) == PAYLOAD
    assert reader.read_range(key, 17, 1234) == PAYLOAD[17:1234]
    assert reader.read_range(key, len(PAYLOAD) - 8, len(PAYLOAD)) == PAYLOAD[-8:]
    assert reader.read_range(key, 5, 5) == b""
    info = reader.object_info(key)
    assert info == ObjectInfo(len(PAYLOAD), store.identity(key))  # type: ignore[attr-defined]
    with pytest.raises(RemoteNotFoundError):
        reader.object_info("data/absent.parquet")
    with pytest.raises(RemoteNotFoundError):
        reader.read_range("data/absent.parquet", 0, 4)


def test_s3_reads_byte_ranges_and_object_info(s3_bucket: S3Bucket) -> None:
    s3_bucket.put("root/data/part.parquet", PAYLOAD)
    store = S3Store(s3_bucket.url("root"), endpoint_url=s3_bucket.endpoint_url)
    check_ranged_reads(store)
    assert store.object_info("data/part.parquet").identity.startswith("etag=")  # type: ignore[union-attr]


def test_gcs_hmac_reads_byte_ranges_through_the_s3_compatible_api(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3_bucket.put("root/data/part.parquet", PAYLOAD)
    store = GcsHmacStore(
        f"gs://{s3_bucket.name}/root", hmac_key_id="testing", hmac_secret="testing", endpoint_url=s3_bucket.endpoint_url
    )
    check_ranged_reads(store)


def test_gcs_reads_byte_ranges_and_the_generation(gcs_bucket: GcsBucket) -> None:
    gcs_bucket.put("root/data/part.parquet", PAYLOAD)
    store = open_store(gcs_bucket.url("root"))
    check_ranged_reads(store)
    assert store.object_info("data/part.parquet").identity.startswith("generation=")  # type: ignore[attr-defined]


def test_azure_reads_byte_ranges_and_object_info(azure_container: AzureContainer) -> None:
    azure_container.put("root/data/part.parquet", PAYLOAD)
    store = open_store(azure_container.url("root"))
    check_ranged_reads(store)


@pytest.fixture
def ranged_http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served with byte ranges on loopback: ``(folder, base URL)``."""
    folder = tmp_path / "site"
    folder.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(RangedFileHandler, directory=str(folder))
    )
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_http_reads_byte_ranges_and_object_info(ranged_http_root: tuple[Path, str]) -> None:
    folder, url = ranged_http_root
    (folder / "data").mkdir()
    (folder / "data" / "part.parquet").write_bytes(PAYLOAD)
    store = HttpStore(url)
    check_ranged_reads(store)
    assert isinstance(store, RangedStore)


def test_http_server_that_ignores_range_is_refused_with_the_fix(http_root: tuple[Path, str]) -> None:
    folder, url = http_root  # the standard library's server: no Range support
    (folder / "part.parquet").write_bytes(PAYLOAD)
    store = HttpStore(url)
    with pytest.raises(StorageError, match=r"Expected HTTP 206 .* found HTTP 200: the server ignores Range"):
        store.read_range("part.parquet", 10, 20)
    assert store.read_range("part.parquet", 0, len(PAYLOAD)) == PAYLOAD  # the whole object: 200 is right
    assert store.read_bytes("part.parquet") == PAYLOAD  # the connection dropped above did not poison the pool


def test_a_truncated_range_is_transient(s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store) -> None:
    s3_bucket.put("root/data/part.parquet", PAYLOAD)
    proxy.set_rules(FaultRule("truncate", limit=1))
    with pytest.raises(TransientStorageError):
        proxied_store.read_range("data/part.parquet", 0, 2000)
    assert proxied_store.read_range("data/part.parquet", 0, 2000) == PAYLOAD[:2000]


def test_fsspec_reads_byte_ranges_and_object_info(tmp_path: Path) -> None:
    url = f"memory://{tmp_path.name}/root"
    store = open_store(url)
    assert isinstance(store, FsspecStore)
    (tmp_path / "p").write_bytes(PAYLOAD)
    store.upload(tmp_path / "p", "data/part.parquet")
    check_ranged_reads(store)
