"""A throttling store slows a download, never fails it: real loopback servers, counted on the server's side.

Throttling (429, S3 ``SlowDown``) is not a failed attempt: ``download_retry`` counts real failures only,
the wait the store names (``Retry-After``) is kept, and ``throttle_deadline`` bounds the whole wait.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.fault_proxy import FaultProxy, FaultRule
from support.s3_server import S3Bucket
from support.throttle_proxy import Throttle, ThrottleServer, ticks

from stream_plugin.storage import HttpStore, RetryPolicy, S3Store, call_with_retries
from stream_plugin.storage.base import ThrottledTooLongError
from stream_plugin.storage.node_rate import MemoryRateBook
from stream_plugin.storage.throttle import NodeThrottle

ONE_ATTEMPT = RetryPolicy(attempts=1, timeout=5.0)  # any failed attempt fails the download


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "site"
    (folder / "ds").mkdir(parents=True)
    (folder / "ds" / "shard.00000.mds").write_bytes(b"s" * 4096)
    return folder


def _download(store: HttpStore | S3Store, dest: Path, policy: RetryPolicy = ONE_ATTEMPT) -> int:
    return call_with_retries(
        lambda: store.download("shard.00000.mds", dest, timeout=policy.timeout),
        policy,
        describe=f"download of 'shard.00000.mds' from {store.url}",
    )


def test_a_429_with_retry_after_holds_the_next_request_until_then(root: Path, tmp_path: Path) -> None:
    # The bucket's clock moves half a token a request: the second request is refused, the third admitted.
    with ThrottleServer(root, Throttle(rate_limit=1.0, retry_after=1), clock=ticks(0.5)) as server:
        store = HttpStore(server.remote("node0", "ds"))
        _download(store, tmp_path / "first")
        _download(store, tmp_path / "second")
        [(refused_at, group, named)] = server.refusals
        after = [arrival for arrival, who, *_ in server.log if who == group and arrival > refused_at]
    assert named == 1 and len(after) == 1
    # By the server's own clock: nothing came from this client before the time its Retry-After named.
    assert after[0] >= refused_at + named
    assert (tmp_path / "second").read_bytes() == (root / "ds" / "shard.00000.mds").read_bytes()


def test_a_store_that_never_stops_throttling_fails_at_the_throttle_deadline_naming_the_rate(
    root: Path, tmp_path: Path
) -> None:
    # The bucket's clock never moves: its one token goes to the first request, every later one is refused.
    with ThrottleServer(root, Throttle(rate_limit=1.0), clock=ticks(0.0)) as server:
        store = HttpStore(server.remote("node0", "ds"))
        _download(store, tmp_path / "first")
        policy = RetryPolicy(attempts=1, timeout=5.0, throttle_deadline=0.5)
        with pytest.raises(ThrottledTooLongError, match=r"throttle_deadline=0\.5s.*HTTP 429.*down to [\d.]+ requests/s"):
            _download(store, tmp_path / "second", policy)
        assert server.count("throttled", "node0") >= 1 and server.count("gets", "node0") == 1


def test_s3_slow_down_is_waited_out_without_using_an_attempt(
    s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path
) -> None:
    s3_bucket.put("root/shard.00000.mds", b"x" * 1000)
    proxy.set_rules(FaultRule("slow_down", limit=3))
    assert _download(proxied_store, tmp_path / "out") == 1000
    assert proxy.injected["slow_down"] == 3


def test_a_real_failure_still_counts_against_download_retry(
    s3_bucket: S3Bucket, proxy: FaultProxy, proxied_store: S3Store, tmp_path: Path
) -> None:
    s3_bucket.put("root/shard.00000.mds", b"x")
    proxy.set_rules(FaultRule("http_503"))  # ServiceUnavailable: an outage, not throttling
    with pytest.raises(Exception, match=r"within 2 attempt\(s\).*ServiceUnavailable"):
        _download(proxied_store, tmp_path / "out", RetryPolicy(attempts=2, timeout=5.0, base_delay=0.0, max_delay=0.0))
    assert proxy.injected["http_503"] == 2


def test_throttling_is_logged_once_a_minute_not_per_request(caplog: pytest.LogCaptureFixture) -> None:
    clock = [1_000.0]
    throttle = NodeThrottle(
        MemoryRateBook(),
        "http://store",
        clock=lambda: clock[0],
        sleep=lambda seconds: clock.__setitem__(0, clock[0] + seconds),
    )
    requests = 0
    with caplog.at_level(logging.WARNING, logger="stream_plugin"):
        while clock[0] < 1_150.0:  # 150 s of requests, one in ten refused
            sent = throttle.admit()
            assert sent is not None
            if requests % 10 == 0:
                throttle.refused(sent, wait=None)
            else:
                throttle.answered(sent)
            requests += 1
            clock[0] += 0.01
    lines = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert requests > 100 and len(lines) == 3  # at the first refusal, then once each minute
    assert "throttling by the store (http://store): this node had 1 of 1 request(s) refused so far" in lines[0]
    assert "refused in the last 6" in lines[1] and "requests/s" in lines[1]  # 60 s, and the slot it found
