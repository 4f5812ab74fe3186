"""GcsStore against a real GCS emulator (gcp-storage-emulator) over loopback HTTP."""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fault_proxy import FaultProxy, FaultRule
from support.gcs_server import GcsBucket
from support.s3_server import S3Bucket

from stream_plugin.errors import ConfigError, MissingDependencyError, StorageError
from stream_plugin.storage import (
    GcsStore,
    RemoteNotFoundError,
    RetryPolicy,
    TransientStorageError,
    call_with_retries,
    open_store,
)
from stream_plugin.storage.base import ThrottledError
from stream_plugin.storage.gcs_hmac import GcsHmacStore

TIMEOUT = 0.5
OBJECT_K = "/o/root%2Fk"  # the JSON API's path of the object root/k (not the bucket's metadata)
FAST_RETRIES = RetryPolicy(attempts=4, timeout=TIMEOUT, base_delay=0.0, max_delay=0.0, jitter=0.0)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture
def gcs_store(gcs_bucket: GcsBucket) -> GcsStore:
    store = open_store(gcs_bucket.url("root"))
    assert isinstance(store, GcsStore)
    return store


@pytest.fixture
def gcs_proxy(gcs_bucket: GcsBucket) -> Iterator[FaultProxy]:
    # Stalls outlast the 0.5 s client timeout 20 times; one ends early when the client hangs up.
    with FaultProxy((gcs_bucket.server.host, gcs_bucket.server.port), stall_seconds=10.0) as proxy:
        yield proxy


def test_upload_then_download_read_exists_and_list_round_trip(
    gcs_store: GcsStore, gcs_bucket: GcsBucket, tmp_path: Path
) -> None:
    gcs_store.upload(write(tmp_path / "a", b"alpha"), "data/a.bin")
    gcs_store.upload(write(tmp_path / "b", b"beta!"), "data/b.bin")
    gcs_store.upload(write(tmp_path / "i", b"{}"), "index.json")
    gcs_bucket.put("rootx/not-mine", b"sibling prefix")

    assert gcs_bucket.keys() == ["root/data/a.bin", "root/data/b.bin", "root/index.json", "rootx/not-mine"]
    assert gcs_store.download("data/a.bin", tmp_path / "out") == 5
    assert (tmp_path / "out").read_bytes() == b"alpha"
    assert gcs_store.read_bytes("index.json") == b"{}"
    assert gcs_store.exists("data/b.bin")
    assert not gcs_store.exists("data")
    assert gcs_store.list() == ["data/a.bin", "data/b.bin", "index.json"]
    assert gcs_store.list("data/") == ["data/a.bin", "data/b.bin"]


def test_large_upload_goes_resumable_and_downloads_intact(gcs_store: GcsStore, tmp_path: Path) -> None:
    payload = os.urandom(9 << 20)  # Above the client's 8 MiB multipart limit: a resumable upload.
    gcs_store.upload(write(tmp_path / "big", payload), "big.bin")
    assert gcs_store.download("big.bin", tmp_path / "out") == len(payload)
    assert (tmp_path / "out").read_bytes() == payload


def test_missing_key_is_not_found_naming_bucket_and_key_and_fails_fast(
    gcs_store: GcsStore, gcs_bucket: GcsBucket, tmp_path: Path
) -> None:
    pattern = rf"gs://{gcs_bucket.name}/root/absent\.bin .*HTTP 404.*check the path"
    with pytest.raises(RemoteNotFoundError, match=pattern):
        gcs_store.read_bytes("absent.bin")
    calls = []

    def attempt() -> int:
        calls.append(1)
        return gcs_store.download("absent.bin", tmp_path / "out")

    with pytest.raises(RemoteNotFoundError, match=pattern):
        call_with_retries(attempt, FAST_RETRIES, describe="download absent.bin")
    assert len(calls) == 1
    assert not gcs_store.exists("absent.bin")


def test_identity_is_the_generation_and_changes_when_the_object_is_rewritten(
    gcs_store: GcsStore, tmp_path: Path
) -> None:
    gcs_store.upload(write(tmp_path / "i", b"one"), "index.json")
    first = gcs_store.identity("index.json")
    assert first is not None and first.startswith("generation=")
    assert gcs_store.identity("index.json") == first
    gcs_store.upload(write(tmp_path / "i", b"two"), "index.json")
    assert gcs_store.identity("index.json") not in (None, first)
    with pytest.raises(RemoteNotFoundError):
        gcs_store.identity("absent.json")


def test_server_errors_and_resets_are_transient_and_retried(
    gcs_bucket: GcsBucket, gcs_proxy: FaultProxy, tmp_path: Path
) -> None:
    gcs_bucket.put("root/k", b"v" * 1000)
    store = GcsStore(gcs_bucket.url("root"), endpoint_url=gcs_proxy.endpoint_url, anonymous=True)
    for fault in ("http_503", "reset", "truncate"):
        gcs_proxy.set_rules(FaultRule(fault, path_contains=OBJECT_K, limit=1))
        with pytest.raises(TransientStorageError, match="will retry"):
            store.download("k", tmp_path / "out", timeout=5)
        assert store.download("k", tmp_path / "out", timeout=5) == 1000
    assert gcs_proxy.injected == {"http_503": 1, "reset": 1, "truncate": 1}


def test_a_429_is_throttling_not_a_failed_attempt(gcs_bucket: GcsBucket, gcs_proxy: FaultProxy, tmp_path: Path) -> None:
    gcs_bucket.put("root/k", b"v" * 1000)
    store = GcsStore(gcs_bucket.url("root"), endpoint_url=gcs_proxy.endpoint_url, anonymous=True)
    gcs_proxy.set_rules(FaultRule("http_429", path_contains=OBJECT_K, limit=1))
    with pytest.raises(ThrottledError, match="rate limit") as caught:
        store.download("k", tmp_path / "out", timeout=5)
    assert caught.value.wait == 0.0  # the Retry-After it sent
    assert store.download("k", tmp_path / "out", timeout=5) == 1000


def test_stalled_server_times_out_as_transient_within_the_timeout(
    gcs_bucket: GcsBucket, gcs_proxy: FaultProxy, tmp_path: Path
) -> None:
    gcs_bucket.put("root/k", b"v")
    store = GcsStore(gcs_bucket.url("root"), endpoint_url=gcs_proxy.endpoint_url, anonymous=True)
    gcs_proxy.set_rules(FaultRule("stall", path_contains=OBJECT_K))
    with pytest.raises(TransientStorageError, match="Timeout"):
        store.download("k", tmp_path / "out", timeout=TIMEOUT)
    # By the proxy's clock: the client hung up on its own, long before the stall would have ended.
    (stall,) = gcs_proxy.finished_stalls(1)
    assert stall.client_left is not None, f"the client waited out the whole {gcs_proxy.stall_seconds} s stall"


def test_access_denied_fails_fast_and_says_check_the_credentials(
    gcs_bucket: GcsBucket, gcs_proxy: FaultProxy
) -> None:
    gcs_bucket.put("root/k", b"v")
    store = GcsStore(gcs_bucket.url("root"), endpoint_url=gcs_proxy.endpoint_url, anonymous=True)
    gcs_proxy.set_rules(FaultRule("http_403", path_contains=OBJECT_K))
    calls = []

    def attempt() -> bytes:
        calls.append(1)
        return store.read_bytes("k")

    with pytest.raises(StorageError, match="check the credentials"):
        call_with_retries(attempt, FAST_RETRIES, describe="read k")
    assert len(calls) == 1


def test_endpoint_comes_from_storage_emulator_host(gcs_bucket: GcsBucket) -> None:
    gcs_bucket.put("root/k", b"via env")
    assert os.environ["STORAGE_EMULATOR_HOST"] == gcs_bucket.endpoint_url
    store = GcsStore(gcs_bucket.url("root"))
    assert store.endpoint_url == gcs_bucket.endpoint_url
    assert store.read_bytes("k") == b"via env"
    bare = GcsStore("gs://b", environ={"STORAGE_EMULATOR_HOST": "127.0.0.1:4443"})
    assert (bare.endpoint_url, bare.emulated) == ("http://127.0.0.1:4443", True)
    # An explicit endpoint may be a private one: it looks for credentials, as Google's client does.
    assert not GcsStore("gs://b", endpoint_url="https://private.example", environ={}).emulated


def test_endpoint_option_points_one_store_at_the_emulator(
    gcs_bucket: GcsBucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    gcs_bucket.put("root/k", b"via option")
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    store = open_store(gcs_bucket.url("root"), **gcs_bucket.store_options)
    assert store.read_bytes("k") == b"via option"


def test_hmac_keys_from_gcs_key_and_gcs_secret_use_the_s3_compatible_api(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GCS's XML API speaks S3; moto stands in for storage.googleapis.com.
    s3_bucket.put("root/k", b"through hmac")
    monkeypatch.setenv("GCS_KEY", "testing")
    monkeypatch.setenv("GCS_SECRET", "testing")
    store = open_store(f"gs://{s3_bucket.name}/root", endpoint_url=s3_bucket.endpoint_url)
    assert isinstance(store, GcsHmacStore)
    assert store.url == f"gs://{s3_bucket.name}/root"
    assert store.read_bytes("k") == b"through hmac"
    assert store.list() == ["k"]
    with pytest.raises(RemoteNotFoundError, match=rf"gs://{s3_bucket.name}/root/absent \(S3-compatible API"):
        store.read_bytes("absent")


def test_hmac_store_defaults_to_the_gcs_xml_endpoint() -> None:
    store = open_store("gs://b/p", hmac_key_id="id", hmac_secret="secret")
    assert isinstance(store, GcsHmacStore)
    assert store.endpoint_url == "https://storage.googleapis.com"


def test_store_pickles_without_its_client_and_works_after_unpickling(
    gcs_store: GcsStore, gcs_bucket: GcsBucket
) -> None:
    gcs_bucket.put("root/k", b"v")
    assert gcs_store.read_bytes("k") == b"v"
    clone = pickle.loads(pickle.dumps(gcs_store))
    assert clone.read_bytes("k") == b"v"
    assert clone.client() is not gcs_store.client()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_builds_its_own_client_and_can_download(
    gcs_store: GcsStore, gcs_bucket: GcsBucket, tmp_path: Path
) -> None:
    gcs_bucket.put("root/k", b"from the child")
    parent_client = gcs_store.client()
    pid = os.fork()
    if pid == 0:  # Child: report through the exit code; never return into pytest.
        status = 1
        try:
            fresh = gcs_store.client() is not parent_client
            gcs_store.download("k", tmp_path / "child-out")
            status = 0 if fresh else 2
        finally:
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(wait_status) == 0
    assert (tmp_path / "child-out").read_bytes() == b"from the child"


def test_url_without_bucket_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"Expected a GCS URL like 'gs://bucket/prefix', found 'gs:///x'"):
        GcsStore("gs:///x")


def test_options_gcs_does_not_take_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"expected options of the gs:// store \(project, credentials_file, .*\), found unknown option\(s\) \['region'\]"):
        open_store("gs://b/p", region="us")


def test_missing_google_cloud_storage_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "stream_plugin.storage.gcs")
    monkeypatch.setitem(sys.modules, "google.cloud", None)  # what an uninstalled package looks like
    with pytest.raises(MissingDependencyError, match=r"gs:// backend .* pip install 'stream-plugin\[gcs\]'"):
        open_store("gs://b/p")
