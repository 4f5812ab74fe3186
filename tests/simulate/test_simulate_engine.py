"""The simulation engine: its reads are the real order's, and its clocks and counters follow the model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.datasets import write_ids

from stream_plugin import Stream, StreamingDataLoader, StreamingDataset
from stream_plugin.errors import ConfigError
from stream_plugin.order.batching import BATCHING_METHODS
from stream_plugin.reading.config import DatasetConfig
from stream_plugin.simulate import Hardware, Workload, simulate
from stream_plugin.simulate.engine import readers_floor, window_steps
from stream_plugin.simulate.ideal_caches import belady_misses, lru_misses
from stream_plugin.simulate.model import INDEX_BYTES_PER_SHARD
from stream_plugin.simulate.reads import plan_reads

SHARD_BYTES = 1 << 20
SHARDS, PER_SHARD, PAYLOAD = 48, 32, 1000
ID_BYTES = 16  # what a write_ids MDS sample takes beyond its payload: its offset, id and length


def settings(**config: object) -> dict[str, object]:
    return {"batch_size": 4, "shuffle": True, "shuffle_block_size": 64, **config}


def workload(**config: object) -> Workload:
    return Workload.synthetic(
        shards=SHARDS,
        samples_per_shard=PER_SHARD,
        raw_bytes_per_shard=SHARD_BYTES,
        config=DatasetConfig(**settings(**config)),  # type: ignore[arg-type]
    )


def hardware(**fields: object) -> Hardware:
    settings = {
        "nodes": 2,
        "devices_per_node": 2,
        "workers": 2,
        "bandwidth": 1e9,
        "step_time": 0.01,
        **fields,
    }
    return Hardware(**settings)  # type: ignore[arg-type]


def write_streams(root: Path, shards: tuple[int, ...]) -> list[Path]:
    """Real MDS streams of ``PER_SHARD`` samples a shard, the layout ``workload`` describes: ids are
    global and consecutive across the streams."""
    size_limit = PER_SHARD * (PAYLOAD + ID_BYTES) + (PAYLOAD + ID_BYTES) // 2
    folders, start = [], 0
    for number, count in enumerate(shards):
        ids = range(start, start + count * PER_SHARD)
        folders.append(write_ids(root / f"stream{number}", ids, size_limit=size_limit, payload=PAYLOAD))
        assert len(list(folders[-1].glob("shard.*.mds"))) == count
        start += count * PER_SHARD
    return folders


@pytest.fixture(scope="module")
def one_stream(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_streams(tmp_path_factory.mktemp("one"), (SHARDS,))


@pytest.fixture(scope="module")
def two_streams(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_streams(tmp_path_factory.mktemp("two"), (SHARDS // 2, SHARDS // 2))


def real_reads(
    streams: list[Path], hw: Hardware, epochs: int, monkeypatch: pytest.MonkeyPatch, **config: object
) -> list[list[np.ndarray]]:
    """``[epoch][rank]``: the sample ids a real ``StreamingDataset`` yields on each rank, in order,
    iterated through the loader without workers (a rank's samples in its order; with workers the
    same samples, split among them). The world is the environment torchrun sets, rank by rank."""
    dataset_settings = settings(**config)
    reads: list[list[np.ndarray]] = [[] for _ in range(epochs)]
    for rank in range(hw.world_size):
        world = {
            "RANK": rank,
            "WORLD_SIZE": hw.world_size,
            "LOCAL_WORLD_SIZE": hw.devices_per_node,
            "LOCAL_RANK": rank % hw.devices_per_node,
        }
        for name, value in world.items():
            monkeypatch.setenv(name, str(value))
        dataset = StreamingDataset(
            streams=[Stream(local=str(folder)) for folder in streams],
            **dataset_settings,  # type: ignore[arg-type]
        )
        loader = StreamingDataLoader(dataset, batch_size=dataset.batch_size, num_workers=0)
        for epoch in range(epochs):
            reads[epoch].append(np.array([int(i) for batch in loader for i in batch["id"]], np.int64))
    return reads


def shards_of(samples_per_shard: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Sample ids -> their shards, by a plain search (the reference the simulator's plan is held to)."""
    ends = np.cumsum(np.asarray(samples_per_shard, np.int64))
    return lambda ids: np.searchsorted(ends, ids, side="right")


def test_without_a_cache_limit_each_node_downloads_each_shard_its_ranks_read_once(
    one_stream: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    work, hw = workload(), hardware(epochs=2)
    result = simulate(work, hw)
    real = real_reads(one_stream, hw, hw.epochs, monkeypatch)
    locate = shards_of(work.samples_per_shard)
    ranks_per_node = hw.devices_per_node
    for node in range(hw.nodes):
        read = set()
        for epoch in range(hw.epochs):
            for rank in range(node * ranks_per_node, (node + 1) * ranks_per_node):
                read |= set(locate(real[epoch][rank]).tolist())
        assert result.node_downloads[node] == len(read)
        assert result.node_requests[node] == len(read)
        assert result.node_bytes[node] == len(read) * SHARD_BYTES
        assert result.node_peak_cache[node] == len(read) * SHARD_BYTES


def test_the_steps_are_the_epochs_global_batches() -> None:
    work, hw = workload(), hardware(epochs=3)
    result = simulate(work, hw)
    global_batch = 4 * hw.world_size
    per_epoch = -(-work.num_samples // global_batch)
    assert result.num_steps == 3 * per_epoch
    assert result.samples_per_step.sum() == 3 * work.num_samples
    assert result.mean_throughput == pytest.approx(3 * work.num_samples / result.total_time)
    assert result.epoch_of_step.tolist() == np.repeat(np.arange(3), per_epoch).tolist()
    assert simulate(work, hardware(epochs=3, max_steps=5)).num_steps == 5


def test_a_fast_link_never_stalls_after_the_first_batch() -> None:
    result = simulate(workload(), hardware(bandwidth=1e12))
    assert result.stalled_steps <= 1
    assert result.total_time == pytest.approx(result.num_steps * 0.01 + result.time_to_first_batch)


def test_a_slow_link_makes_the_run_last_as_long_as_its_bytes_take() -> None:
    bandwidth = 4 * SHARD_BYTES  # 4 shards a second: far slower than the steps
    result = simulate(workload(), hardware(bandwidth=bandwidth))
    per_node = result.node_bytes.max() / bandwidth
    assert result.stalled_steps >= 1
    assert result.total_wait >= per_node - result.num_steps * 0.01  # the steps wait for the link
    assert per_node <= result.total_time <= per_node + result.num_steps * 0.01 + 1.0


def test_latency_delays_the_first_batch() -> None:
    quick = simulate(workload(), hardware(latency=0.0))
    late = simulate(workload(), hardware(latency=0.2))
    assert late.time_to_first_batch == pytest.approx(quick.time_to_first_batch + 0.2, abs=0.01)


def test_decompression_adds_its_time_to_compressed_shards() -> None:
    work = Workload.synthetic(
        shards=48,
        samples_per_shard=32,
        raw_bytes_per_shard=4 * SHARD_BYTES,
        stored_bytes_per_shard=SHARD_BYTES,
        config=DatasetConfig(batch_size=4),
    )
    instant = simulate(work, hardware())
    slow = simulate(work, hardware(decompress_rate=40 * SHARD_BYTES))  # 0.1 s a shard
    assert slow.time_to_first_batch >= instant.time_to_first_batch + 0.1 - 1e-9
    assert slow.egress_bytes == instant.egress_bytes == 2 * 24 * SHARD_BYTES


def test_a_rate_limit_answers_429_and_slows_the_run() -> None:
    free = simulate(workload(), hardware())
    throttled = simulate(replace(workload(), download_retry=20), hardware(rate_limit=5.0))
    assert free.node_throttled.sum() == 0
    assert throttled.node_throttled.sum() > 0
    assert throttled.requests == free.requests  # throttled requests are retried, not lost
    assert throttled.total_time >= (free.requests - 5) / 5.0  # one bucket of 5 tokens, then 5 a second


def test_belady_downloads_no_more_than_lru_and_no_fewer_than_the_optimum(
    one_stream: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = hardware(nodes=1, devices_per_node=1, workers=1, epochs=3)
    limit = 12 * SHARD_BYTES  # a quarter of the 48 shards
    belady = simulate(workload(cache_limit=limit, predownload=4), hw)
    lru = simulate(workload(cache_limit=limit, eviction="lru", predownload=4), hw)
    real = real_reads(one_stream, hw, 3, monkeypatch)  # one worker: the rank's order is the worker's
    reads = np.concatenate([shards_of(np.full(SHARDS, PER_SHARD))(real[epoch][0]) for epoch in range(3)])
    optimum = belady_misses(reads, 12)
    assert optimum <= belady.node_downloads[0] <= lru.node_downloads[0]
    assert lru.node_downloads[0] >= lru_misses(reads, 12) - 12  # LRU cannot beat its ideal by a cache's worth
    assert belady.node_peak_cache[0] <= limit and lru.node_peak_cache[0] <= limit


def test_min_cache_limit_is_the_smallest_limit_that_downloads_nothing_twice() -> None:
    # One reader a node: the loader accepts a cache_limit of 3 shards (readers_floor), below the peak.
    work, hw = workload(predownload=8), hardware(epochs=1, devices_per_node=1, workers=1)
    unlimited = simulate(work, hw)
    enough = simulate(workload(predownload=8, cache_limit=unlimited.download_once_cache_limit), hw)
    assert enough.node_downloads.tolist() == unlimited.node_downloads.tolist()
    assert unlimited.download_once_cache_limit < unlimited.node_peak_cache.max()  # one epoch: read shards can go
    assert readers_floor(work, hw) == 3 * SHARD_BYTES < unlimited.download_once_cache_limit
    fewer = simulate(workload(predownload=8, cache_limit=readers_floor(work, hw)), hw)
    assert fewer.node_downloads.sum() >= unlimited.node_downloads.sum()


def test_the_smallest_limit_without_extra_egress_is_never_below_what_the_loader_accepts() -> None:
    work, hw = workload(predownload=8), hardware(epochs=1)  # 2 ranks x 2 workers: 12 shards at least
    assert simulate(work, hw).download_once_cache_limit == readers_floor(work, hw) == 12 * SHARD_BYTES


def test_a_cache_limit_the_loader_refuses_is_refused_with_the_loaders_message() -> None:
    with pytest.raises(ConfigError, match=r"expected at least 12582912 bytes for 4 readers on this node"):
        simulate(workload(cache_limit=12 * SHARD_BYTES - 1), hardware())


def test_the_prefetch_window_counts_every_worker_and_the_loader_prefetch() -> None:
    # predownload=8 at batch 4: two batches of each of 2 workers (4 steps) past the last batch the
    # workers may build, prefetch_factor=2 batches of each worker ahead of the trainer.
    assert window_steps(workload(predownload=8), hardware(workers=2)) == 2 * 2 + 4
    assert window_steps(workload(predownload=9), hardware(workers=0)) == 1 * 2 + 3


def test_shuffle_figures_are_given_for_every_epoch() -> None:
    plan = plan_reads(workload(), hardware(epochs=2))
    assert len(plan.shuffle) == 2
    for figures in plan.shuffle:
        assert 0.0 < figures.spread_median <= 1.0
        assert 1.0 <= figures.shards_per_batch <= 16
    unshuffled = plan_reads(workload(shuffle=False), hardware())
    assert unshuffled.shuffle[0].shards_per_batch < plan.shuffle[0].shards_per_batch


def test_impossible_settings_are_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match="bandwidth: expected a finite number > 0"):
        hardware(bandwidth=0)
    with pytest.raises(ConfigError, match="num_canonical_nodes: expected at most"):
        simulate(workload(num_canonical_nodes=5000), hardware())
    with pytest.raises(ConfigError, match="cache_limit: expected at least 12582912 bytes"):
        simulate(workload(cache_limit=SHARD_BYTES // 2), hardware())


@pytest.mark.parametrize("batching_method", BATCHING_METHODS)
def test_each_nodes_shard_spans_are_its_ranks_real_reads(
    batching_method: str, two_streams: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read ``i`` of a rank falls in step ``i // batch_size``; a node's span of a shard runs from its
    ranks' first read of it to their last. (``device_per_stream``, whose order depends on the device
    batch, is planned rank by rank; the others as the node's band of every global batch.)"""
    work = replace(workload(batching_method=batching_method), shards_per_stream=(24, 24))
    hw = hardware(epochs=1, workers=0)
    plan = plan_reads(work, hw)
    real = real_reads(two_streams, hw, 1, monkeypatch, batching_method=batching_method)
    locate = shards_of(work.samples_per_shard)
    for node in range(hw.nodes):
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for rank in range(node * hw.devices_per_node, (node + 1) * hw.devices_per_node):
            shards = locate(real[0][rank])  # workers=0: the rank's pass in order
            for read, shard in enumerate(shards.tolist()):
                first[shard] = min(first.get(shard, read // 4), read // 4)
                last[shard] = max(last.get(shard, read // 4), read // 4)
        spans = plan.epochs[0][node]
        assert dict(zip(spans.shards.tolist(), spans.first.tolist(), strict=True)) == first
        assert dict(zip(spans.shards.tolist(), spans.last.tolist(), strict=True)) == last
    assert any("device_per_stream" in note for note in plan.notes) == (batching_method == "device_per_stream")


def test_each_node_downloads_the_index_once_before_its_first_shard() -> None:
    shape: dict[str, Any] = {"shards": SHARDS, "samples_per_shard": PER_SHARD, "raw_bytes_per_shard": SHARD_BYTES}
    config = DatasetConfig(**settings())  # type: ignore[arg-type]
    index = SHARDS * INDEX_BYTES_PER_SHARD
    bare = simulate(Workload.synthetic(**shape, config=config), hardware(bandwidth=1e6, latency=0.01))
    indexed = simulate(
        Workload.synthetic(**shape, index_bytes_per_shard=INDEX_BYTES_PER_SHARD, config=config),
        hardware(bandwidth=1e6, latency=0.01),
    )
    assert (indexed.node_requests - bare.node_requests).tolist() == [1, 1]
    assert (indexed.node_bytes - bare.node_bytes).tolist() == [index, index]
    assert indexed.node_downloads.tolist() == bare.node_downloads.tolist()  # the index is not a shard
    # The first shards wait for it: its request's latency and its bytes alone on the link.
    assert indexed.time_to_first_batch == pytest.approx(bare.time_to_first_batch + 0.01 + index / 1e6, rel=1e-6)
    assert indexed.summary()["index_bytes_per_node"] == index
