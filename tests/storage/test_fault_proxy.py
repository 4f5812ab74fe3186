"""Every fault the proxy injects is retried by S3Store + call_with_retries, and the result is intact."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest
from support.fault_proxy import FaultKind, FaultProxy, FaultRule, request_kind
from support.s3_server import S3Bucket

from stream_plugin.storage import (
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    RetriesExhaustedError,
    RetryPolicy,
    S3Store,
    TransientStorageError,
    call_with_retries,
)

PAYLOAD = os.urandom(200_000)

# Short enough that stall tests take well under a second, long enough for a loaded 2-core runner.
TIMEOUT = 0.5
FAST_RETRIES = RetryPolicy(attempts=4, timeout=TIMEOUT, base_delay=0.0, max_delay=0.0, jitter=0.0)


def download_with_retries(store: S3Store, key: str, dest: Path) -> tuple[int, list[BaseException]]:
    """Download through the retry loop; return bytes written and the errors that were retried."""
    retried: list[BaseException] = []
    written = call_with_retries(
        lambda: store.download(key, dest, timeout=FAST_RETRIES.timeout),
        FAST_RETRIES,
        describe=f"download {key}",
        on_retry=lambda attempt, error: retried.append(error),
    )
    return written, retried


@pytest.mark.parametrize("fault", ["http_500", "http_503", "reset", "stall", "stall_body", "truncate"])
def test_each_fault_is_retried_once_per_injection_and_download_is_intact(
    fault: FaultKind, s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path
) -> None:
    s3_bucket.put("root/shard.bin", PAYLOAD)
    proxy.set_rules(FaultRule(fault, every=1, limit=2))

    written, retried = download_with_retries(proxied_store, "shard.bin", tmp_path / "out")

    assert proxy.injected[fault] == 2
    assert len(retried) == 2
    assert all(isinstance(error, TransientStorageError) for error in retried)
    assert written == len(PAYLOAD)
    assert (tmp_path / "out").read_bytes() == PAYLOAD


def test_truncated_body_is_a_transient_error_not_a_short_file(
    s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path
) -> None:
    s3_bucket.put("root/shard.bin", PAYLOAD)
    proxy.set_rules(FaultRule("truncate"))

    with pytest.raises(TransientStorageError, match=r"s3://.*/root/shard\.bin"):
        proxied_store.download("shard.bin", tmp_path / "out", timeout=TIMEOUT)
    with pytest.raises(TransientStorageError):
        proxied_store.read_bytes("shard.bin", timeout=TIMEOUT)
    assert proxy.injected["truncate"] == 2


def test_persistent_faults_exhaust_the_attempts_and_name_the_download(
    s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path
) -> None:
    s3_bucket.put("root/shard.bin", b"x")
    proxy.set_rules(FaultRule("http_503"))

    with pytest.raises(RetriesExhaustedError, match=r"download shard\.bin.*4 attempt.*ServiceUnavailable") as caught:
        download_with_retries(proxied_store, "shard.bin", tmp_path / "out")
    assert isinstance(caught.value.__cause__, TransientStorageError)
    assert proxy.injected["http_503"] == FAST_RETRIES.attempts


def test_injected_403_fails_fast_without_retrying(
    s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path
) -> None:
    s3_bucket.put("root/shard.bin", b"x")
    proxy.set_rules(FaultRule("http_403"))

    with pytest.raises(RemoteAccessDeniedError, match="check the credentials"):
        download_with_retries(proxied_store, "shard.bin", tmp_path / "out")
    assert proxy.requests["get"] == 1


def test_missing_key_through_the_proxy_fails_fast(
    proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path
) -> None:
    with pytest.raises(RemoteNotFoundError, match="check the path"):
        download_with_retries(proxied_store, "absent.bin", tmp_path / "out")
    assert proxy.requests["get"] == 1


def test_upload_faults_are_retried_and_the_object_arrives(
    s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path
) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(PAYLOAD)
    proxy.set_rules(
        FaultRule("http_500", kinds=frozenset({"put"}), limit=1),
        FaultRule("reset", kinds=frozenset({"put"}), limit=1),
    )

    retried: list[BaseException] = []
    call_with_retries(
        lambda: proxied_store.upload(source, "up.bin"),
        FAST_RETRIES,
        describe="upload",
        on_retry=lambda attempt, error: retried.append(error),
    )

    assert len(retried) == proxy.total_injected == 2
    assert s3_bucket.get("root/up.bin") == PAYLOAD


def test_every_kind_of_request_passes_through_cleanly_with_keep_alive_clients(
    proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path
) -> None:
    # One boto3 client reuses pooled connections; the proxy's Connection: close must keep it correct.
    source = tmp_path / "source.bin"
    for index in range(5):
        source.write_bytes(PAYLOAD[: 1000 * (index + 1)])
        proxied_store.upload(source, f"k{index}")
    for index in range(5):
        assert proxied_store.exists(f"k{index}")
        assert proxied_store.read_bytes(f"k{index}") == PAYLOAD[: 1000 * (index + 1)]
    assert proxied_store.list() == [f"k{index}" for index in range(5)]
    assert not proxied_store.exists("absent")
    assert proxy.total_injected == 0
    assert proxy.requests == {"put": 5, "head": 6, "get": 5, "list": 1}


def test_every_nth_schedule_fires_on_exact_request_numbers(
    s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store
) -> None:
    s3_bucket.put("root/k", b"v")
    proxy.set_rules(FaultRule("http_500", every=3, skip=1))
    outcomes = []
    for _ in range(8):
        try:
            proxied_store.read_bytes("k", timeout=TIMEOUT)
            outcomes.append("ok")
        except TransientStorageError:
            outcomes.append("fault")
    # Request 1 is skipped; of the rest (positions 1..7), positions 3 and 6 fire: requests 4 and 7.
    assert outcomes == ["ok", "ok", "ok", "fault", "ok", "ok", "fault", "ok"]


def test_random_fraction_is_reproducible_from_the_seed(s3_bucket: S3Bucket, proxied_store: S3Store) -> None:
    s3_bucket.put("root/k", b"v")
    upstream = (s3_bucket.server.host, s3_bucket.server.port)

    def faults_with_seed(seed: int) -> list[str | None]:
        rule = FaultRule("http_503", every=None, fraction=0.5)
        with FaultProxy(upstream, [rule], seed=seed) as running:
            store = S3Store(s3_bucket.url("root"), endpoint_url=running.endpoint_url)
            for _ in range(10):
                with contextlib.suppress(TransientStorageError):
                    store.read_bytes("k", timeout=TIMEOUT)
            return [fault for _, _, fault in running.log]

    first = faults_with_seed(7)
    assert first == faults_with_seed(7)
    assert 0 < first.count("http_503") < 10


def test_bandwidth_throttle_slows_the_body(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    s3_bucket.put("root/k", PAYLOAD[:100_000])
    upstream = (s3_bucket.server.host, s3_bucket.server.port)
    with FaultProxy(upstream, bandwidth=400_000) as running:
        store = S3Store(s3_bucket.url("root"), endpoint_url=running.endpoint_url)
        started = time.perf_counter()
        assert store.download("k", tmp_path / "out", timeout=5) == 100_000
        elapsed = time.perf_counter() - started
    assert elapsed >= 0.2  # 100 kB at 400 kB/s takes 0.25 s.


def test_request_kinds_are_classified_from_method_and_path() -> None:
    assert request_kind("GET", "/bucket/key") == "get"
    assert request_kind("GET", "/bucket?list-type=2&prefix=a") == "list"
    assert request_kind("GET", "/bucket/") == "list"
    assert request_kind("HEAD", "/bucket/key") == "head"
    assert request_kind("PUT", "/bucket/key?partNumber=1&uploadId=x") == "put"
