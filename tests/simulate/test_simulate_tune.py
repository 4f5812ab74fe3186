"""``simulate.tune``: the search over predownload, workers, cache limit and shuffle block, on small
workloads whose answer is known."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.reading.config import DatasetConfig
from stream_plugin.simulate import Hardware, Workload, simulate
from stream_plugin.simulate.model import INDEX_BYTES_PER_SHARD
from stream_plugin.simulate.tune import (
    Setting,
    TuneGrid,
    node_cache_limit_floor,
    tune,
    tune_start_up,
)

SHARD_BYTES = 1_000_000
SAMPLES_PER_SHARD = 100
BATCH = 10
# One shard takes 5 s to download and is read in 10 steps of 1 s: the bandwidth keeps up only when the
# next shard's download starts at least 5 steps (50 samples) before the reader reaches it.
BANDWIDTH = SHARD_BYTES / 5.0


def bandwidth_bound(*, shards: int = 8, epochs: int = 1) -> tuple[Workload, Hardware]:
    workload = Workload.synthetic(
        shards=shards,
        samples_per_shard=SAMPLES_PER_SHARD,
        raw_bytes_per_shard=SHARD_BYTES,
        config=DatasetConfig(batch_size=BATCH),
    )
    hardware = Hardware(
        nodes=1, devices_per_node=1, workers=1, bandwidth=BANDWIDTH, step_time=1.0, epochs=epochs
    )
    return workload, hardware


def grid(
    predownload: tuple[int, ...] = (10,),
    num_workers: tuple[int, ...] = (1,),
    cache_limit: tuple[int | None, ...] = (None,),
    shuffle_block_size: tuple[int | None, ...] = (None,),
) -> TuneGrid:
    return TuneGrid(predownload, num_workers, cache_limit, shuffle_block_size)


def test_tune_picks_the_smallest_predownload_that_keeps_up_with_a_slow_link() -> None:
    workload, hardware = bandwidth_bound()
    result = tune(workload, hardware, grid=grid(predownload=(10, 20, 40, 80)))
    assert result.best is not None
    assert result.best.setting.predownload == 40
    assert {c.setting.predownload for c in result.candidates if c.qualifies} == {40, 80}
    short = [c for c in result.candidates if c.setting.predownload == 10]
    assert short and not short[0].qualifies and short[0].simulation.stalls_after_first_batch > 0


def test_tune_reports_no_best_when_no_setting_keeps_up_and_ranks_the_least_waiting_first() -> None:
    workload, hardware = bandwidth_bound()
    result = tune(workload, hardware, grid=grid(predownload=(10, 20)))
    assert result.best is None
    waits = [candidate.simulation.total_wait for candidate in result.candidates]
    assert waits == sorted(waits) and len(waits) == 2
    assert result.runners_up(5) == result.candidates


def test_tune_accepts_a_stalling_setting_that_reaches_the_target_throughput() -> None:
    workload, hardware = bandwidth_bound()
    stalling = simulate(*Setting(10, 1, None, None).apply(workload, hardware))
    throughput = stalling.summary()["mean_throughput_samples_per_s"]
    assert stalling.stalls_after_first_batch > 0
    result = tune(workload, hardware, target_throughput=throughput * 0.99, grid=grid(predownload=(10, 80)))
    assert result.best is not None and result.best.setting.predownload == 10
    assert result.best.simulation.stalls_after_first_batch > 0


def test_tune_prefers_the_smallest_cache_that_downloads_no_more() -> None:
    workload, hardware = bandwidth_bound(epochs=2)
    floor = node_cache_limit_floor(workload, devices_per_node=1, workers=1)
    result = tune(
        workload, hardware, price_per_gb=0.1, grid=grid(predownload=(80,), cache_limit=(floor, None))
    )
    assert result.best is not None
    best, unlimited = result.best, next(c for c in result.candidates if c.setting.cache_limit is None)
    # Epoch 2 reads shards 0..7 again after shard 7: only a cache of all 8 downloads each once.
    assert best.setting.cache_limit == unlimited.simulation.download_once_cache_limit == 8 * SHARD_BYTES
    assert best.simulation.egress_bytes == unlimited.simulation.egress_bytes == 8 * SHARD_BYTES
    smallest = next(c for c in result.candidates if c.setting.cache_limit == floor)
    assert smallest.simulation.egress_bytes > best.simulation.egress_bytes
    assert smallest.cost > best.cost


def test_tune_tries_the_reported_minimum_cache_of_a_qualifying_setting_only() -> None:
    workload, hardware = bandwidth_bound()
    result = tune(workload, hardware, grid=grid(predownload=(10, 80)))
    unlimited = next(c for c in result.candidates if c.setting == Setting(80, 1, None, None))
    tried = {c.setting.cache_limit for c in result.candidates if c.setting.predownload == 80}
    assert tried == {unlimited.simulation.download_once_cache_limit, None}
    assert [c.setting.cache_limit for c in result.candidates if c.setting.predownload == 10] == [None]


def test_tune_cost_is_the_egress_at_the_price() -> None:
    workload, hardware = bandwidth_bound()
    result = tune(workload, hardware, price_per_gb=0.09, grid=grid(predownload=(80,)))
    assert result.best is not None
    for candidate in result.candidates:
        assert candidate.cost == pytest.approx(candidate.simulation.egress_bytes / 1e9 * 0.09)
    assert result.summary()["best"]["cost"] == result.best.cost == pytest.approx(8 * SHARD_BYTES / 1e9 * 0.09)


def test_tune_breaks_ties_with_fewer_workers_then_smaller_predownload() -> None:
    workload, hardware = bandwidth_bound()
    result = tune(workload, hardware, grid=grid(predownload=(80, 90), num_workers=(1, 2)))
    unlimited = [c.setting for c in result.candidates if c.qualifies and c.setting.cache_limit is None]
    # Every one downloads the same bytes with no limit: fewer workers first, then the smaller predownload.
    assert [(s.num_workers, s.predownload) for s in unlimited] == [(1, 80), (1, 90), (2, 80), (2, 90)]


def test_tune_ranks_a_smaller_cache_with_the_same_egress_first() -> None:
    workload, hardware = bandwidth_bound(epochs=2)
    result = tune(workload, hardware, grid=grid(predownload=(80,), cache_limit=(16 * SHARD_BYTES, None)))
    # 8 shards: the reported download_once_cache_limit of two epochs read in order, tried in stage 2.
    assert [c.setting.cache_limit for c in result.candidates] == [8 * SHARD_BYTES, 16 * SHARD_BYTES, None]
    assert all(c.qualifies and c.simulation.egress_bytes == 8 * SHARD_BYTES for c in result.candidates)


def test_tune_summary_lists_the_best_and_the_runners_up_with_their_costs() -> None:
    workload, hardware = bandwidth_bound()
    result = tune(workload, hardware, price_per_gb=0.05, grid=grid(predownload=(10, 80, 90)))
    summary = result.summary(runners_up=3)
    assert summary["best"] is not None and summary["best"]["predownload"] == 80
    assert summary["simulated"] == len(result.candidates) and summary["qualifying"] >= 2
    assert [row["predownload"] for row in summary["runners_up"]][0] == 90
    assert all(row["cost"] == pytest.approx(0.0004) for row in [summary["best"], *summary["runners_up"]])
    waits = [row["total_wait_s"] for row in summary["runners_up"] if not row["qualifies"]]
    assert waits == sorted(waits)


def test_tune_lists_a_setting_the_simulation_refuses() -> None:
    workload, hardware = bandwidth_bound()
    result = tune(workload, hardware, grid=grid(predownload=(80,), cache_limit=(1, None)))
    assert [setting.cache_limit for setting, _ in result.refused] == [1]
    assert "cache_limit" in result.refused[0][1]


def test_tune_leaves_the_inputs_unchanged() -> None:
    workload, hardware = bandwidth_bound()
    tune(workload, hardware, grid=grid(predownload=(10, 80), num_workers=(1, 2)))
    assert workload.config.predownload is None and hardware.workers == 1


def test_tune_grid_for_workload_is_derived_from_the_batch_the_share_and_the_block() -> None:
    workload = Workload.synthetic(
        shards=64,
        samples_per_shard=1_000,
        raw_bytes_per_shard=SHARD_BYTES,
        config=DatasetConfig(
            batch_size=16, shuffle=True, shuffle_block_size=8_000, cache_limit=40 * SHARD_BYTES
        ),
    )
    hardware = Hardware(nodes=2, devices_per_node=1, workers=3)
    found = TuneGrid.for_workload(workload, hardware)
    assert found.predownload == (32, 128, 512)
    assert found.num_workers == (1, 2, 3, 4, 8)
    floor = node_cache_limit_floor(workload, devices_per_node=1, workers=8)
    assert floor == 24 * SHARD_BYTES  # 8 readers x 3 shards, as the loader asks (engine.readers_floor)
    # The node's share (32 shards), half and a quarter raised to the floor, the configured 40, no limit.
    assert found.cache_limit == (24 * SHARD_BYTES, 32 * SHARD_BYTES, 40 * SHARD_BYTES, None)
    assert found.shuffle_block_size == (2_000, 8_000)


def test_tune_grid_keeps_a_block_of_at_least_one_shard() -> None:
    workload = Workload.synthetic(
        shards=8,
        samples_per_shard=1_000,
        raw_bytes_per_shard=SHARD_BYTES,
        config=DatasetConfig(batch_size=4, shuffle=True, shuffle_block_size=2_000),
    )
    assert TuneGrid.for_workload(workload, Hardware(nodes=1)).shuffle_block_size == (1_000, 2_000)


def test_tune_grid_refuses_an_empty_or_fractional_choice() -> None:
    with pytest.raises(ConfigError, match=r"TuneGrid.num_workers: expected a non-empty tuple .* found \(\)"):
        grid(num_workers=())
    with pytest.raises(ConfigError, match=r"TuneGrid.predownload: expected ints >= 1, found 0"):
        grid(predownload=(0, 8))


def test_tune_refuses_a_target_throughput_that_is_not_positive() -> None:
    workload, hardware = bandwidth_bound()
    with pytest.raises(ConfigError, match=r"target_throughput: expected samples per second > 0 .* found 0"):
        tune(workload, hardware, target_throughput=0, grid=grid())
    with pytest.raises(ConfigError, match=r"price_per_gb: expected a price >= 0 .* found -1"):
        tune(workload, hardware, price_per_gb=-1, grid=grid())


def test_setting_apply_changes_only_the_four_options() -> None:
    workload, hardware = bandwidth_bound()
    tuned_workload, tuned_hardware = Setting(40, 2, 5 * SHARD_BYTES, 300).apply(workload, hardware)
    assert tuned_workload.config == replace(
        workload.config, predownload=40, cache_limit=5 * SHARD_BYTES, shuffle_block_size=300
    )
    assert tuned_hardware == replace(hardware, workers=2)
    assert tuned_workload.samples_per_shard is workload.samples_per_shard


def test_the_start_up_search_ranks_staggered_and_fewer_first_downloads_against_the_rate_limit() -> None:
    workload = Workload.synthetic(
        shards=400,
        samples_per_shard=100,
        raw_bytes_per_shard=1 << 20,
        index_bytes_per_shard=INDEX_BYTES_PER_SHARD,
        config=DatasetConfig(batch_size=4, shuffle=True, predownload=8),
    )
    hardware = Hardware(nodes=16, devices_per_node=4, workers=1, latency=0.03, rate_limit=50, step_time=0.1)
    found = tune_start_up(workload, hardware, target_first_batch=4.5, staggers=(0.0, 5.0), first_shards=(None, 1))
    assert [(c.start_stagger, c.first_shards, c.qualifies) for c in found] == [
        (0.0, None, True),  # within the target: the least change first
        (0.0, 1, True),
        (5.0, None, False),  # the rest by their first batch
        (5.0, 1, False),
    ]
    assert all(c.simulation.num_steps == 1 for c in found)  # simulated to the first batch only
    by_lever = {(c.start_stagger, c.first_shards): c.simulation for c in found}
    # Staggering spreads the storm: no 429 where the unstaggered start meets hundreds; the last node
    # starts 15/16 of the stagger late.
    assert by_lever[5.0, None].node_throttled.sum() == 0 < by_lever[0.0, None].node_throttled.sum()
    assert by_lever[5.0, None].time_to_first_batch >= 5.0 * 15 / 16
    for simulation in by_lever.values():  # the store's rate bounds every start: a second's burst, then 50/s
        assert simulation.time_to_first_batch >= (simulation.requests - 50) / 50
    assert found[0].summary()["time_to_first_batch_s"] == found[0].simulation.time_to_first_batch
    with pytest.raises(ConfigError, match="target_first_batch: expected seconds > 0"):
        tune_start_up(workload, hardware, target_first_batch=0)
