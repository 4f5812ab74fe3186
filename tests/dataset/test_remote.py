"""The dataset over real object stores on loopback: faults, many readers, cache limits, statistics.

The scenarios taking the ``remote`` fixture run on every store (S3, GCS, Azure Blob; see
``support.remotes``); the others test store-independent rules on S3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.datasets import write_ids
from support.fault_proxy import FaultProxy, FaultRule
from support.remotes import Remote
from support.resume import assert_resumes_identically
from support.s3_server import S3Bucket

from stream_plugin import ConfigError, StreamingDataLoader, StreamingDataset

SAMPLES = 1000


def assert_intact(sample: dict) -> None:
    assert sample["data"] == bytes([sample["id"] % 251]) * 40


@pytest.fixture
def s3_dataset(s3_bucket: S3Bucket, remote_1k: Path) -> str:
    s3_bucket.upload_folder(remote_1k, "data")
    return s3_bucket.url("data")


@pytest.fixture
def remote_dataset(remote: Remote, remote_1k: Path) -> str:
    remote.upload_folder(remote_1k, "data")
    return remote.url("data")


def test_reading_through_faults_gives_every_sample_intact_and_counts_retries(
    remote: Remote, remote_dataset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = {"http_503": 5, "reset": 7, "truncate": 11}
    rules = [
        FaultRule(fault, kinds=frozenset({"get"}), path_contains="shard", every=every[fault])
        for fault in remote.download_faults
    ]
    with FaultProxy((remote.host, remote.port), rules) as proxy:
        remote.point_at(monkeypatch, proxy.endpoint_url)
        dataset = StreamingDataset(
            remote=remote_dataset, local=str(tmp_path / "cache"), batch_size=10, download_retry=4
        )
        samples = list(dataset)
        assert sorted(sample["id"] for sample in samples) == list(range(SAMPLES))
        for sample in samples:
            assert_intact(sample)
        injected = sum(proxy.injected.values())
        assert injected > 0
        assert dataset.node_stats().retries == injected
        assert dataset.node_stats().shards_downloaded == len(dataset.shards)


def test_a_missing_remote_fails_fast_naming_the_url(remote: Remote, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="index.json"):
        StreamingDataset(remote=remote.url("nothing-here"), local=str(tmp_path / "cache"), batch_size=4)


def test_resuming_on_another_node_from_a_remote_is_exact(
    remote: Remote, remote_dataset: str, tmp_path: Path
) -> None:
    def loader(cache: str) -> StreamingDataLoader:
        dataset = StreamingDataset(
            remote=remote_dataset, local=str(tmp_path / cache), batch_size=10, shuffle=True, num_canonical_nodes=2
        )
        return StreamingDataLoader(dataset, batch_size=10)

    # The resumed run starts on an empty cache, as on a fresh node: everything comes from the store again.
    assert_resumes_identically([lambda: loader("first"), lambda: loader("resumed")], cuts=[37], epochs=1)


READER = """
import json, sys
from stream_plugin import StreamingDataLoader, StreamingDataset
dataset = StreamingDataset(remote=sys.argv[1], local=sys.argv[2], batch_size=10, shuffle=True)
ids = []
for batch in StreamingDataLoader(dataset, batch_size=10, num_workers=2):
    for sample_id, data in zip(batch["id"].tolist(), batch["data"]):
        assert data == bytes([sample_id % 251]) * 40, sample_id
        ids.append(sample_id)
print(json.dumps(ids))
"""


def test_eight_readers_on_one_cold_cache_download_each_shard_once(
    remote: Remote, remote_dataset: str, tmp_path: Path
) -> None:
    # 4 ranks of one node x 2 DataLoader workers each = 8 reader processes sharing one cache folder.
    cache = tmp_path / "cache"
    env = {**os.environ, **remote.environment()}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", READER, remote_dataset, str(cache)],
            env={
                **env,
                "RANK": str(rank),
                "WORLD_SIZE": "4",
                "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": "4",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(4)
    ]
    ids: list[int] = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=240)
        assert process.returncode == 0, stderr
        ids += json.loads(stdout.strip().splitlines()[-1])
    assert sorted(ids) == list(range(SAMPLES))
    dataset = StreamingDataset(remote=remote_dataset, local=str(cache), batch_size=10)
    stats = dataset.node_stats()
    assert stats.shards_downloaded == len(dataset.shards)
    assert stats.retries == 0


def cache_usage(folder: Path) -> int:
    total = 0
    for path in folder.glob("shard.*"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:  # evicted by a worker between the listing and the stat
            continue
    return total


def test_cache_limit_holds_while_reading_a_dataset_three_times_larger_twice(
    remote: Remote, tmp_path: Path
) -> None:
    # ~50 shards of 1 KiB, so a third of the dataset holds the working set of 2 workers.
    remote.upload_folder(write_ids(tmp_path / "small-shards", range(SAMPLES), size_limit=1024), "small")
    s3_dataset = remote.url("small")
    probe = StreamingDataset(remote=s3_dataset, local=str(tmp_path / "probe"), batch_size=10)
    total = sum(entry.raw_data.bytes for entry in probe.shards)
    limit = total // 3
    cache = tmp_path / "cache"
    dataset = StreamingDataset(
        remote=s3_dataset, local=str(cache), batch_size=10, shuffle=True, cache_limit=limit
    )
    loader = StreamingDataLoader(dataset, batch_size=10, num_workers=2)
    for _ in range(2):
        ids = []
        for batch in loader:
            assert cache_usage(cache) <= limit
            ids += batch["id"].tolist()
            for sample_id, data in zip(batch["id"].tolist(), batch["data"]):
                assert data == bytes([sample_id % 251]) * 40
        assert sorted(ids) == list(range(SAMPLES))
    assert dataset.node_stats().bytes_evicted > 0


def test_a_cache_limit_too_small_for_the_readers_names_the_smallest_value(
    s3_bucket: S3Bucket, s3_dataset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    with pytest.raises(ConfigError, match=r"cache_limit: expected at least \d+ bytes for 1 readers"):
        StreamingDataset(remote=s3_dataset, local=str(tmp_path / "a"), batch_size=10, cache_limit=100)
    dataset = StreamingDataset(
        remote=s3_dataset, local=str(tmp_path / "b"), batch_size=10, cache_limit="13kb"
    )
    with pytest.raises(ConfigError, match="for 4 readers on this node"):
        StreamingDataLoader(dataset, batch_size=10, num_workers=4)


def test_a_local_only_stream_is_never_evicted(remote_1k: Path, tmp_path: Path) -> None:
    dataset = StreamingDataset(local=str(remote_1k), batch_size=10, cache_limit=1)
    assert sorted(sample["id"] for sample in dataset) == list(range(SAMPLES))
    assert len(list(remote_1k.glob("shard.*.mds"))) == len(dataset.shards)


def test_open_shards_per_reader_grow_with_the_cache_limit(
    s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Open shards are pinned against eviction, so the limit bounds them; a roomy limit must not force
    a shuffled pass to reopen a shard at nearly every sample."""
    s3_bucket.upload_folder(write_ids(tmp_path / "small-shards", range(SAMPLES), size_limit=1024), "sized")
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)

    def open_shards(local: str, cache_limit: int | None) -> int:
        dataset = StreamingDataset(
            remote=s3_bucket.url("sized"), local=str(tmp_path / local), batch_size=10, cache_limit=cache_limit
        )
        return dataset._shard_access().max_open

    probe = StreamingDataset(remote=s3_bucket.url("sized"), local=str(tmp_path / "probe"), batch_size=10)
    largest = max(entry.raw_data.bytes for entry in probe.shards)
    assert open_shards("smallest", 3 * largest) == 2  # the smallest workable limit: 2 open, 1 downloading
    assert open_shards("twenty", 21 * largest) == 20
    assert open_shards("unlimited", None) > len(probe.shards)


def test_a_cache_limit_does_not_bound_the_open_shards_of_a_local_only_stream(remote_1k: Path) -> None:
    dataset = StreamingDataset(local=str(remote_1k), batch_size=10, cache_limit=1)
    assert dataset._shard_access().max_open > len(dataset.shards)
