"""S3Store against a real moto server over loopback HTTP."""

from __future__ import annotations

import gc
import os
import pickle
from pathlib import Path

import pytest
from botocore import UNSIGNED
from support.fault_proxy import FaultProxy, FaultRule
from support.s3_server import CREDENTIALS, S3Bucket

from stream_plugin.errors import ConfigError, StorageError
from stream_plugin.storage import (
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    RetryPolicy,
    S3Store,
    TransientStorageError,
    call_with_retries,
    open_store,
)
from stream_plugin.storage.s3 import resolve_endpoint

# Short enough that stall tests take well under a second, long enough for a loaded 2-core runner.
TIMEOUT = 0.5
FAST_RETRIES = RetryPolicy(attempts=4, timeout=TIMEOUT, base_delay=0.0, max_delay=0.0, jitter=0.0)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_upload_then_download_read_exists_and_list_round_trip(
    s3_store: S3Store, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    s3_store.upload(write(tmp_path / "a", b"alpha"), "data/a.bin")
    s3_store.upload(write(tmp_path / "b", b"beta!"), "data/b.bin")
    s3_store.upload(write(tmp_path / "i", b"{}"), "index.json")
    s3_bucket.put("rootx/not-mine", b"sibling prefix")

    assert s3_bucket.keys() == ["root/data/a.bin", "root/data/b.bin", "root/index.json", "rootx/not-mine"]
    assert s3_store.download("data/a.bin", tmp_path / "out") == 5
    assert (tmp_path / "out").read_bytes() == b"alpha"
    assert s3_store.read_bytes("index.json") == b"{}"
    assert s3_store.exists("data/b.bin")
    assert not s3_store.exists("data")
    assert s3_store.list() == ["data/a.bin", "data/b.bin", "index.json"]
    assert s3_store.list("data/") == ["data/a.bin", "data/b.bin"]


def test_rig_uploads_a_folder_that_open_store_lists(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    (tmp_path / "dataset" / "sub").mkdir(parents=True)
    (tmp_path / "dataset" / "index.json").write_bytes(b"{}")
    (tmp_path / "dataset" / "sub" / "shard.00000.mds").write_bytes(b"mds")
    keys = s3_bucket.upload_folder(tmp_path / "dataset", "ds")
    assert keys == ["ds/index.json", "ds/sub/shard.00000.mds"]
    store = open_store(s3_bucket.url("ds"), **s3_bucket.store_options)
    assert store.list() == ["index.json", "sub/shard.00000.mds"]


def test_large_upload_goes_multipart_and_downloads_intact(s3_store: S3Store, tmp_path: Path) -> None:
    payload = os.urandom(9 << 20)  # Above boto3's 8 MiB multipart threshold.
    s3_store.upload(write(tmp_path / "big", payload), "big.bin")
    assert s3_store.download("big.bin", tmp_path / "out") == len(payload)
    assert (tmp_path / "out").read_bytes() == payload


def test_store_at_bucket_root_lists_every_key(s3_bucket: S3Bucket) -> None:
    s3_bucket.put("x/y", b"1")
    s3_bucket.put("z", b"2")
    store = S3Store(f"s3://{s3_bucket.name}", endpoint_url=s3_bucket.endpoint_url)
    assert store.list() == ["x/y", "z"]
    assert store.read_bytes("x/y") == b"1"


def test_missing_key_is_not_found_naming_bucket_and_key(
    s3_store: S3Store, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    pattern = rf"s3://{s3_bucket.name}/root/absent\.bin .*NoSuchKey.*check the path"
    with pytest.raises(RemoteNotFoundError, match=pattern):
        s3_store.download("absent.bin", tmp_path / "out")
    with pytest.raises(RemoteNotFoundError, match=pattern):
        s3_store.read_bytes("absent.bin")
    assert not s3_store.exists("absent.bin")


def test_missing_bucket_is_not_found(s3_bucket: S3Bucket) -> None:
    store = S3Store("s3://no-such-bucket-here/data", endpoint_url=s3_bucket.endpoint_url)
    with pytest.raises(RemoteNotFoundError, match="NoSuchBucket.*check the path"):
        store.read_bytes("index.json")


def test_not_found_fails_fast_inside_the_retry_loop(s3_store: S3Store, tmp_path: Path) -> None:
    calls = []

    def attempt() -> int:
        calls.append(1)
        return s3_store.download("absent.bin", tmp_path / "out")

    with pytest.raises(RemoteNotFoundError):
        call_with_retries(attempt, FAST_RETRIES, describe="download absent.bin")
    assert len(calls) == 1


def test_access_denied_by_moto_fails_fast_and_says_check_credentials(
    s3_store: S3Store, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    s3_bucket.put("root/k", b"v")
    calls = []

    def attempt() -> bytes:
        calls.append(1)
        return s3_store.read_bytes("k")

    with s3_bucket.server.enforce_auth():
        with pytest.raises(
            RemoteAccessDeniedError, match=r"InvalidAccessKeyId \(HTTP 403\); check the credentials"
        ):
            call_with_retries(attempt, FAST_RETRIES, describe="read k")
        with pytest.raises(RemoteAccessDeniedError, match="check the credentials"):
            s3_store.download("k", tmp_path / "out")
        with pytest.raises(RemoteAccessDeniedError, match="check the credentials"):
            s3_store.exists("k")
        with pytest.raises(RemoteAccessDeniedError, match="check the credentials"):
            s3_store.list()
    assert len(calls) == 1
    assert s3_store.read_bytes("k") == b"v"  # Auth enforcement was switched back off.


def test_stalled_server_times_out_as_transient_within_the_timeout(
    s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path
) -> None:
    s3_bucket.put("root/k", b"v")
    proxy.set_rules(FaultRule("stall"))
    with pytest.raises(TransientStorageError, match="ReadTimeoutError"):
        proxied_store.download("k", tmp_path / "out", timeout=TIMEOUT)
    # By the proxy's clock: the client hung up on its own, long before the stall would have ended.
    (stall,) = proxy.finished_stalls(1)
    assert stall.client_left is not None, f"the client waited out the whole {proxy.stall_seconds} s stall"


def test_clients_are_cached_per_timeout_with_botocore_retries_off(s3_store: S3Store) -> None:
    quick = s3_store.client(1.5)
    assert s3_store.client(1.5) is quick
    assert s3_store.client(None) is not quick
    assert quick.meta.config.read_timeout == 1.5
    assert quick.meta.config.connect_timeout == 1.5
    assert quick.meta.config.retries["total_max_attempts"] == 1


def test_aws_retry_environment_variables_do_not_add_attempts(
    s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As docs/storage.md says: download_retry alone decides how often we try; botocore's env settings do not.
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "5")
    s3_bucket.put("root/k", b"v")
    proxy.set_rules(FaultRule("http_503", limit=3))
    with pytest.raises(TransientStorageError):
        proxied_store.download("k", tmp_path / "out", timeout=5)
    assert proxy.injected["http_503"] == 1


def test_endpoint_comes_from_s3_endpoint_url_env_var(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    s3_bucket.put("root/k", b"via env")
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    store = S3Store(s3_bucket.url("root"))
    assert store.endpoint_url == s3_bucket.endpoint_url
    assert store.read_bytes("k") == b"via env"


def test_endpoint_option_beats_s3_endpoint_url_which_beats_aws_endpoint_url() -> None:
    both = {"S3_ENDPOINT_URL": "http://s3-env", "AWS_ENDPOINT_URL": "http://aws-env"}
    assert resolve_endpoint("http://option", both) == "http://option"
    assert resolve_endpoint(None, both) == "http://s3-env"
    assert resolve_endpoint(None, {"AWS_ENDPOINT_URL": "http://aws-env"}) == "http://aws-env"
    assert resolve_endpoint(None, {}) is None


def test_custom_endpoint_defaults_to_path_style_addressing() -> None:
    assert S3Store("s3://b", endpoint_url="http://127.0.0.1:9000", environ={}).addressing_style == "path"
    assert S3Store("s3://b", environ={}).addressing_style == "auto"


def test_requests_are_unsigned_when_no_credentials_are_found(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3_bucket.put("root/public", b"anyone", ACL="public-read")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    store = S3Store(s3_bucket.url("root"), endpoint_url=s3_bucket.endpoint_url)
    assert store.is_unsigned
    assert store.client().meta.config.signature_version is UNSIGNED
    assert store.read_bytes("public") == b"anyone"  # moto, like S3, serves public objects anonymously.
    s3_bucket.put("root/private", b"owner only")
    with pytest.raises(RemoteAccessDeniedError, match="check the credentials"):
        store.read_bytes("private")


def test_requests_are_signed_when_credentials_exist_unless_unsigned_is_forced(s3_bucket: S3Bucket) -> None:
    assert os.environ["AWS_ACCESS_KEY_ID"] == CREDENTIALS["AWS_ACCESS_KEY_ID"]
    assert not S3Store(s3_bucket.url(), endpoint_url=s3_bucket.endpoint_url).is_unsigned
    assert S3Store(s3_bucket.url(), endpoint_url=s3_bucket.endpoint_url, unsigned=True).is_unsigned


def test_store_pickles_without_clients_and_works_after_unpickling(
    s3_store: S3Store, s3_bucket: S3Bucket
) -> None:
    s3_bucket.put("root/k", b"v")
    assert s3_store.read_bytes("k") == b"v"  # Builds a client that must not be pickled.
    clone = pickle.loads(pickle.dumps(s3_store))
    assert clone.read_bytes("k") == b"v"
    assert clone.client() is not s3_store.client()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_builds_its_own_client_and_can_download(
    s3_store: S3Store, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    s3_bucket.put("root/k", b"from the child")
    parent_client = s3_store.client()
    pid = os.fork()
    if pid == 0:  # Child: report through the exit code; never return into pytest.
        status = 1
        try:
            fresh = s3_store.client() is not parent_client
            s3_store.download("k", tmp_path / "child-out")
            status = 0 if fresh else 2
        finally:
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(wait_status) == 0
    assert (tmp_path / "child-out").read_bytes() == b"from the child"
    assert s3_store.client() is parent_client


def test_url_without_bucket_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"Expected an S3 URL like 's3://bucket/prefix', found 's3:///x'"):
        S3Store("s3:///x")


def test_key_escaping_the_root_is_rejected(s3_store: S3Store) -> None:
    with pytest.raises(StorageError, match=r"found '\.\./other' with a '\.\.' segment"):
        s3_store.read_bytes("../other")


def test_client_creation_runs_no_full_garbage_collection(s3_bucket: S3Bucket) -> None:
    full_collections = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full_collections.append(info)

    store = S3Store(s3_bucket.url("root"), endpoint_url=s3_bucket.endpoint_url)
    gc.callbacks.append(count)
    try:
        for timeout in (1.0, 2.0, 3.0):  # a new client each: ~30k new objects apiece
            store.client(timeout)
    finally:
        gc.callbacks.remove(count)
    assert full_collections == []
