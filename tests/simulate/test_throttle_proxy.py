"""The throttling loopback server (tests/support/throttle_proxy.py) serves, counts, and holds its limits."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import urllib3
from support.throttle_proxy import Throttle, ThrottleServer, file_kind, ticks

from stream_plugin.storage.http import HttpStore
from stream_plugin.storage.retry import RetryPolicy, call_with_retries

SIZE = 64 * 1024


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "shard.00000.mds").write_bytes(bytes(range(256)) * (SIZE // 256))
    (tmp_path / "ds" / "index.json").write_text("{}")
    return tmp_path


def get(url: str) -> urllib3.BaseHTTPResponse:
    return urllib3.request("GET", url, retries=False)


def test_files_are_served_byte_exact_and_counted_per_group_and_kind(root: Path) -> None:
    with ThrottleServer(root) as server:
        body = get(server.remote("node0", "ds/shard.00000.mds")).data
        get(server.remote("node1", "ds/shard.00000.mds"))
        get(server.remote("node1", "ds/index.json"))
        missing = get(server.remote("node1", "ds/shard.00001.mds"))
        assert body == (root / "ds" / "shard.00000.mds").read_bytes()
        assert missing.status == 404
        assert (server.count("gets", "node0"), server.count("bytes", "node0")) == (1, SIZE)
        assert (server.count("gets", "node1"), server.count("gets", "node1", "index")) == (1, 1)


def test_a_path_outside_the_root_is_not_served(root: Path) -> None:
    (root.parent / "secret.txt").write_text("no")
    with ThrottleServer(root / "ds") as server:
        assert get(f"http://127.0.0.1:{server.port}/node0/../secret.txt").status == 404


def test_file_kind_names_shards_and_the_index() -> None:
    assert [file_kind(p) for p in ("a/shard.00001.mds.zstd", "a/index.json", "a/x")] == [
        "shard",
        "index",
        "other",
    ]


def test_every_answer_waits_the_latency_before_its_first_byte(root: Path) -> None:
    with ThrottleServer(root, Throttle(latency=0.2)) as server:
        started = time.monotonic()
        get(server.remote("node0", "ds/index.json"))
        assert time.monotonic() - started >= 0.2


def test_downloads_of_one_group_share_its_bandwidth_and_groups_do_not(root: Path) -> None:
    bandwidth = 2 * SIZE  # one file takes 0.5 s alone: two started together overlap on any machine

    def fetch_two(server: ThrottleServer, groups: tuple[str, str]) -> float:
        threads = [
            threading.Thread(target=get, args=(server.remote(group, "ds/shard.00000.mds"),))
            for group in groups
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.monotonic() - started

    with ThrottleServer(root, Throttle(bandwidth=bandwidth)) as server:
        shared = fetch_two(server, ("node0", "node0"))
        fetch_two(server, ("node1", "node2"))
        queued = [server.queued_chunks(group) for group in ("node0", "node1", "node2")]
    # One group's two answers take turns on its line, so together they take their bytes' time at least;
    # answers of different groups never wait for each other's line (counted by the server, not timed).
    assert shared >= 2 * SIZE / bandwidth, shared
    assert queued[0] > 0 and queued[1:] == [0, 0], queued


def test_requests_beyond_the_rate_limit_are_answered_429_without_retry_after(root: Path) -> None:
    # The bucket's clock moves 0.25 s a request: 2 tokens, then one more after 4 requests' time.
    with ThrottleServer(root, Throttle(rate_limit=1.0, burst=2), clock=ticks(0.25)) as server:
        answers = [get(server.remote("node0", "ds/index.json")) for _ in range(5)]
        assert [answer.status for answer in answers] == [200, 200, 429, 429, 200]
        assert all("Retry-After" not in answer.headers for answer in answers)
        assert (server.count("gets", "node0", "index"), server.count("throttled", "node0", "index")) == (3, 2)
        assert [status for *_, status in server.log] == [200, 200, 429, 429, 200]


def test_kinds_left_unlimited_pass_the_rate_limit_without_a_token(root: Path) -> None:
    limits = Throttle(rate_limit=1.0, unlimited=frozenset({"index"}))
    with ThrottleServer(root, limits, clock=ticks(0.25)) as server:  # a token every 4 counted requests
        statuses = [get(server.remote("node0", "ds/index.json")).status for _ in range(3)]
        statuses += [get(server.remote("node0", "ds/shard.00000.mds")).status for _ in range(2)]
        assert statuses == [200, 200, 200, 200, 429]


def test_the_http_store_waits_out_each_429_without_an_attempt_and_gets_the_file(root: Path, tmp_path: Path) -> None:
    failures: list[BaseException] = []
    # The bucket's clock moves 0.125 s a request (half a token): the 2nd and 3rd downloads meet one 429 each.
    with ThrottleServer(root, Throttle(rate_limit=4.0), clock=ticks(0.125)) as server:
        store = HttpStore(server.remote("node0", "ds"))
        policy = RetryPolicy(attempts=1)  # a 429 is not a failed attempt: one attempt is enough
        for number in range(3):
            call_with_retries(
                lambda number=number: store.download("shard.00000.mds", tmp_path / f"copy{number}"),  # type: ignore[misc]
                policy,
                describe="download",
                on_retry=lambda _attempt, error: failures.append(error),
            )
        assert server.count("gets", "node0") == 3
        assert server.count("throttled", "node0") == 2
        assert failures == []
        assert (tmp_path / "copy2").read_bytes() == (root / "ds" / "shard.00000.mds").read_bytes()
