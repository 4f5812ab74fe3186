"""The node's future, planned once per process from the order: it covers every read of every rank and
worker of the node, each inside its shard's span, and nothing the node does not read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.orders import sample_ids

from stream_plugin import StreamingDataset
from stream_plugin.cache.future import NEVER
from stream_plugin.errors import ConfigError
from stream_plugin.order.shuffle import SpanKey, register_shuffle, unregister_shuffle
from stream_plugin.order.topology import Topology
from stream_plugin.reading.cursor import IterationPlan
from stream_plugin.reading.epochs import EpochPlanner, OrderSettings
from stream_plugin.reading.node_forecast import NodeForecaster
from stream_plugin.reading.shard_table import ShardTable
from stream_plugin.reading.world import World

NODES, RANKS_PER_NODE, WORKERS, DEVICE_BATCH = 2, 2, 2, 2
GLOBAL_BATCH = NODES * RANKS_PER_NODE * DEVICE_BATCH  # 1,000 samples: 125 whole global batches


def _dataset(remote: Path, cache: Path, rank: int, replication: int | None = None) -> StreamingDataset:
    world = World(
        rank=rank,
        world_size=NODES * RANKS_PER_NODE,
        local_rank=rank % RANKS_PER_NODE,
        local_world_size=RANKS_PER_NODE,
    )
    return StreamingDataset(
        remote=remote.as_uri(),
        local=str(cache),
        batch_size=DEVICE_BATCH,
        shuffle=True,
        shuffle_block_size=64,
        num_canonical_nodes=NODES,
        cache_limit="1mb",
        world=world,
        replication=replication,
    )


def _forecast(forecaster: NodeForecaster, plan: IterationPlan, topology: Topology):
    return forecaster.forecast(
        plan,
        topology,
        device_batch_size=DEVICE_BATCH,
        global_batch_size=GLOBAL_BATCH,
        rows_per_epoch=1000 // GLOBAL_BATCH,
        drop_last=False,
        batching_method="random",
    )


@pytest.mark.parametrize("start", [0, 40 * GLOBAL_BATCH])
def test_every_read_of_the_nodes_ranks_and_workers_lies_in_its_shards_span(
    remote_1k: Path, tmp_path: Path, start: int
) -> None:
    plan = IterationPlan(epoch=1, start=start, epoch_batch_size=GLOBAL_BATCH, num_canonical_nodes=NODES)
    node_shards: set[int] = set()
    future = None
    for rank in range(RANKS_PER_NODE, 2 * RANKS_PER_NODE):  # the second node's ranks
        dataset = _dataset(remote_1k, tmp_path / "cache", rank)
        for worker in range(WORKERS):
            topology = Topology(NODES, RANKS_PER_NODE, WORKERS, rank=rank, worker=worker)
            forecast = _forecast(NodeForecaster(dataset.plan.planner, len(dataset.shards)), plan, topology)
            assert forecast is not None
            future, clock = forecast
            shards = dataset.plan.table.locate(sample_ids(dataset, plan, topology))[0]  # (n,)
            lag = clock.num_workers * clock.width
            times = np.array([clock.time(p) + lag for p in range(len(shards))])  # (n,)
            assert (future.first[0, shards] <= times).all()
            assert (times <= future.last[0, shards]).all()
            node_shards |= set(shards.tolist())
    assert future is not None
    assert set(np.flatnonzero(future.first[0] != NEVER).tolist()) == node_shards
    # The next epoch follows, later than every read of this one.
    assert future.first.shape[0] == 2
    assert future.first[1][future.first[1] != NEVER].min() > future.last[0][future.last[0] != NEVER].max()


def test_an_unknown_eviction_is_refused_by_the_dataset_with_its_choices(remote_1k: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"eviction: expected one of \['belady', 'lru'\], found 'mru'"):
        StreamingDataset(remote=remote_1k.as_uri(), local=str(tmp_path / "c"), batch_size=2, eviction="mru")


def test_a_dataset_without_cache_limit_plans_no_future(remote_1k: Path, tmp_path: Path) -> None:
    dataset = StreamingDataset(remote=remote_1k.as_uri(), local=str(tmp_path / "c"), batch_size=2)
    assert not dataset._shard_access().follows_future


def test_the_epoch_planned_ahead_is_the_next_pass_and_is_not_planned_again(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _dataset(remote_1k, tmp_path / "cache", 2)
    planned: list[int] = []
    planner = dataset.plan.planner
    plan_pieces = planner.rank_batch_pieces

    def counting(epoch: int, **options):
        planned.append(epoch)
        return plan_pieces(epoch, **options)

    planner.rank_batch_pieces = counting  # type: ignore[method-assign]
    forecaster = NodeForecaster(planner, len(dataset.shards))
    topology = Topology(NODES, RANKS_PER_NODE, WORKERS, rank=2, worker=1)
    first = _forecast(forecaster, IterationPlan(0, 0, GLOBAL_BATCH, NODES), topology)
    second = _forecast(forecaster, IterationPlan(1, 0, GLOBAL_BATCH, NODES), topology)
    assert first is not None and second is not None
    assert planned == [0, 1, 2]
    # Epoch 1's spans: the second pass's own, one epoch earlier on its clock than in the first pass's.
    epoch_span = 1000 // GLOBAL_BATCH * RANKS_PER_NODE * DEVICE_BATCH
    read = first[0].first[1] != NEVER
    assert (first[0].first[1][read] - epoch_span == second[0].first[0][read]).all()


def test_device_per_stream_batching_plans_no_future(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _dataset(remote_1k, tmp_path / "cache", 2)
    forecaster = NodeForecaster(dataset.plan.planner, len(dataset.shards))
    topology = Topology(NODES, RANKS_PER_NODE, WORKERS, rank=2, worker=0)
    forecast = forecaster.forecast(
        IterationPlan(0, 0, GLOBAL_BATCH, NODES),
        topology,
        device_batch_size=DEVICE_BATCH,
        global_batch_size=GLOBAL_BATCH,
        rows_per_epoch=1000 // GLOBAL_BATCH,
        drop_last=False,
        batching_method="device_per_stream",
    )
    assert forecast is None


def test_a_node_whose_ranks_are_replicas_elsewhere_forecasts_the_coordinates_it_reads(
    remote_1k: Path, tmp_path: Path
) -> None:
    """(tp=2, dp=2) with tp outermost on 2 nodes of 2: node 1 holds ranks 2 and 3, coordinates 0 and 1,
    so it reads every column of the batch; its future covers the reads of both, and nothing else."""
    from stream_plugin.order.data_parallel import DataParallelLayout

    layout = DataParallelLayout(size=2, coordinates=(0, 1, 0, 1))
    global_batch = 2 * DEVICE_BATCH
    plan = IterationPlan(epoch=1, start=0, epoch_batch_size=global_batch, num_canonical_nodes=NODES)
    dataset = _dataset(remote_1k, tmp_path / "cache", rank=2, replication=2)  # its global batch: 2 coordinates
    forecaster = NodeForecaster(dataset.plan.planner, len(dataset.shards))
    node_shards: set[int] = set()
    future = None
    for rank in (2, 3):
        topology = Topology(NODES, RANKS_PER_NODE, 0, rank=rank, data_parallel=layout)
        forecast = forecaster.forecast(
            plan,
            topology,
            device_batch_size=DEVICE_BATCH,
            global_batch_size=global_batch,
            rows_per_epoch=1000 // global_batch,
            drop_last=False,
            batching_method="random",
        )
        assert forecast is not None
        future, clock = forecast
        assert (clock.ranks, clock.slot) == (2, layout.coordinates[rank])
        shards = dataset.plan.table.locate(sample_ids(dataset, plan, topology))[0]  # (n,)
        times = np.array([clock.time(p) + clock.num_workers * clock.width for p in range(len(shards))])
        assert (future.first[0, shards] <= times).all()
        assert (times <= future.last[0, shards]).all()
        node_shards |= set(shards.tolist())
    assert future is not None
    assert set(np.flatnonzero(future.first[0] != NEVER).tolist()) == node_shards


def _by_value(ids: np.ndarray, shard_bounds: np.ndarray, key: SpanKey) -> None:
    ids[:] = np.sort(ids)[::-1]  # a user's shuffle that moves each sample by its value


@pytest.mark.parametrize("algorithm", ["py1e", "by_value"])
def test_the_planners_shard_ids_are_the_shards_of_its_sample_ids(algorithm: str) -> None:
    """Spans of shard ids for a built-in shuffle; a user's shuffle's sample ids looked up instead."""
    table = ShardTable.from_counts([[30, 0, 45, 7], [60, 12]])
    settings = OrderSettings(
        shuffle=True, shuffle_algo=algorithm, shuffle_seed=3, shuffle_block_size=20,
        batching_method="random", sampling_method="balanced", sampling_granularity=1,
    )
    register_shuffle("by_value")(_by_value)
    try:
        planner = EpochPlanner(table, table.samples_per_stream, settings)
        options = dict(
            epoch_batch_size=8, num_canonical_nodes=2, device_batch_size=4, consumed=8, global_batch_size=8,
            topology=Topology(num_nodes=2, rank=1), drop_last=False,
        )
        samples = np.concatenate(list(planner.rank_batch_pieces(1, **options)))  # type: ignore[arg-type]
        shards = np.concatenate(list(planner.rank_batch_pieces(1, shard_ids=True, **options)))  # type: ignore[arg-type]
    finally:
        unregister_shuffle("by_value")
    assert len(samples) == 73  # rank 1 of 2: half of the 154 samples after the first batch of 8
    np.testing.assert_array_equal(shards, table.shards_of(samples))
