"""Eviction by the node's future, on real runs: 1 node, 2 ranks x 2 workers, 64 shards, 4 epochs.

A loopback S3 server (moto behind a counting proxy) serves 64 equal shards; each run starts the ranks
as real processes with an env-var world. The node's actual read sequence (every rank's batches, global
batch after global batch) gives two yardsticks of the same capacity: an ideal LRU cache and the
offline optimum (Belady). Shard GETs are counted at the server.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from support.datasets import write_ids
from support.fault_proxy import FaultProxy
from support.ranks import launch_ranks
from support.s3_server import CREDENTIALS, S3Bucket, S3Server

from stream_plugin.simulate.ideal_caches import belady_misses, lru_misses

SCRIPT = Path(__file__).with_name("eviction_rank.py")
REPO = Path(__file__).resolve().parents[2]
SHARDS, PER_SHARD, SHARD_LIMIT = 64, 16, 1100  # size_limit 1100 holds exactly 16 of write_ids' samples
RANKS, WORKERS, DEVICE_BATCH, EPOCHS = 2, 2, 8, 4
BLOCK = 4 * PER_SHARD  # a shuffle block spans 4 shards
FRACTIONS = (0.25, 0.5, 0.75)


@dataclass(frozen=True)
class Run:
    gets: int  # shard GETs the server answered
    most_cached: int  # the most bytes of placed shards the cache held after any batch
    cache_limit: int
    ideal_lru: int  # downloads of an ideal LRU cache of the same size on the run's read sequence
    optimum: int  # ... of the offline optimum


@dataclass
class Egress:
    bucket: S3Bucket
    proxy: FaultProxy
    shard_bytes: int
    root: Path
    runs: dict[tuple[str, float], Run]

    def run(self, eviction: str, fraction: float) -> Run:
        found = self.runs.get((eviction, fraction))
        if found is None:
            found = self.runs[eviction, fraction] = self._run(eviction, fraction)
            print(f"eviction={eviction} cache={fraction:.0%}: {found}")
        return found

    def _run(self, eviction: str, fraction: float) -> Run:
        capacity = int(SHARDS * fraction)
        cache_limit = capacity * self.shard_bytes
        self.proxy.reset_counts()
        outputs = start_ranks(
            self.bucket.url("egress"),
            self.root / f"{eviction}-{fraction}",
            self.proxy.endpoint_url,
            cache_limit=cache_limit,
            eviction=eviction,
        )
        gets = sum(1 for method, target, _ in self.proxy.log if method == "GET" and "/shard." in target)
        reads = node_reads(outputs) // PER_SHARD  # (samples,) shard of each read, in the node's order
        most_cached = max(output["most_cached"] for output in outputs)
        return Run(gets, most_cached, cache_limit, lru_misses(reads, capacity), belady_misses(reads, capacity))


def start_ranks(remote: str, local: Path, endpoint: str, *, cache_limit: int, eviction: str) -> list[dict]:
    command = [sys.executable, str(SCRIPT), "--remote", remote, "--local", str(local)]
    command += ["--device-batch", str(DEVICE_BATCH), "--workers", str(WORKERS), "--epochs", str(EPOCHS)]
    command += ["--block", str(BLOCK), "--cache-limit", str(cache_limit), "--eviction", eviction]
    if os.environ.get("EVICTION_RUN_PREDOWNLOAD"):
        command += ["--predownload", os.environ["EVICTION_RUN_PREDOWNLOAD"]]
    env = {**CREDENTIALS, "PYTHONPATH": str(REPO), "S3_ENDPOINT_URL": endpoint}
    return launch_ranks(command, world=RANKS, ranks_per_node=RANKS, env=env, timeout=240)


def node_reads(outputs: list[dict]) -> np.ndarray:
    """The node's sample ids in the order it read them: global batch t is every rank's batch t."""
    counts = {len(output["batches"]) for output in outputs}
    assert len(counts) == 1, f"ranks took different numbers of batches: {counts}"
    rows = [sum((output["batches"][t] for output in outputs), []) for t in range(counts.pop())]
    return np.array(sum(rows, []), dtype=np.int64)


@pytest.fixture(scope="module")
def egress(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Egress]:
    root = tmp_path_factory.mktemp("egress")
    folder = write_ids(root / "data", range(SHARDS * PER_SHARD), size_limit=SHARD_LIMIT)
    index = json.loads((folder / "index.json").read_text())
    sizes = {shard["raw_data"]["bytes"] for shard in index["shards"]}
    assert len(index["shards"]) == SHARDS and len(sizes) == 1, "the run needs 64 equal shards"
    bucket = s3_server.create_bucket()
    bucket.upload_folder(folder, "egress")
    with FaultProxy((s3_server.host, s3_server.port)) as proxy:
        yield Egress(bucket, proxy, sizes.pop(), root, {})


@pytest.mark.parametrize("fraction", FRACTIONS)
def test_belady_eviction_downloads_at_most_1_15_times_the_optimum(egress: Egress, fraction: float) -> None:
    run = egress.run("belady", fraction)
    assert run.gets <= 1.15 * run.optimum, run
    assert 0 < run.most_cached <= run.cache_limit, run


def test_a_cache_that_holds_the_share_downloads_each_shard_once(egress: Egress) -> None:
    run = egress.run("belady", 1.0)
    assert run.gets == SHARDS == run.optimum, run


@pytest.mark.parametrize("fraction", FRACTIONS[1:])
def test_belady_eviction_downloads_at_most_0_8_times_an_ideal_lru(egress: Egress, fraction: float) -> None:
    run = egress.run("belady", fraction)
    assert run.gets <= 0.8 * run.ideal_lru, run


def test_lru_eviction_stays_an_option_and_downloads_more_than_belady_in_the_same_setting(egress: Egress) -> None:
    lru, belady = egress.run("lru", 0.5), egress.run("belady", 0.5)
    assert lru.optimum <= belady.gets < lru.gets, (lru, belady)
