"""Topology values and slicing global batches for one (rank, worker) from any resume point."""

from __future__ import annotations

import numpy as np
import pytest
from whole_job import assert_job_resumes_identically, job_batches, loader_batches

from stream_plugin.errors import ConfigError, StateError
from stream_plugin.order.layout import DatasetShape
from stream_plugin.order.partition import (
    device_batch_size,
    rank_worker_batches,
    remaining_global_batches,
    split_tail,
)
from stream_plugin.order.plan import EpochOrder, OrderConfig, plan_epoch
from stream_plugin.order.topology import Topology


@pytest.fixture(scope="module")
def order() -> EpochOrder:
    shape = DatasetShape(np.array([30, 25, 40, 35, 20]), np.zeros(5, dtype=np.int64))  # 150 samples
    config = OrderConfig(shuffle=True, num_canonical_nodes=2, global_batch_size=16, shuffle_block_size=20)
    return plan_epoch(shape, [np.arange(150)], config, epoch=0)  # 9 full batches and 6 samples


def test_topology_derives_world_node_and_data_parallel_rank() -> None:
    topology = Topology(num_nodes=2, ranks_per_node=4, workers_per_rank=0, replication=2, rank=5)
    assert (topology.world_size, topology.node, topology.local_rank) == (8, 1, 1)
    assert (topology.data_parallel_size, topology.data_parallel_rank, topology.num_workers) == (4, 2, 1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"num_nodes": 2, "ranks_per_node": 3, "replication": 4},
            r"replication: expected a divisor of world_size=6, found 4",
        ),
        (
            {"num_nodes": 2, "ranks_per_node": 2, "rank": 4},
            r"rank: expected 0 <= rank < world_size=4, found 4",
        ),
        ({"workers_per_rank": 2, "worker": 2}, r"worker: expected 0 <= worker < 2 .* found 2"),
        ({"workers_per_rank": 0, "worker": 1}, r"worker: expected 0 <= worker < 1 .* found 1"),
        ({"num_nodes": 0}, r"num_nodes: expected an int >= 1, found 0"),
        ({"ranks_per_node": True}, r"ranks_per_node: expected an int >= 1, found True"),
    ],
)
def test_topology_rejects_impossible_layouts(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Topology(**kwargs)


def test_global_batch_must_split_evenly_over_data_parallel_ranks() -> None:
    assert device_batch_size(48, Topology(2, 8, replication=2)) == 6
    with pytest.raises(
        ConfigError, match=r"global_batch_size: expected a multiple of the data-parallel size 16 .* found 40"
    ):
        device_batch_size(40, Topology(2, 8))


def test_rank_reads_its_slot_range_and_workers_take_turns(order: EpochOrder) -> None:
    topology = Topology(1, 4, workers_per_rank=3, rank=2, worker=1)
    batches = rank_worker_batches(order, consumed=0, global_batch_size=16, topology=topology)
    np.testing.assert_array_equal(batches.full, order.batches[1:9:3, 8:12])
    assert len(batches.last) == 0  # the partial 10th batch is worker 0's (batch 9 = 0 mod 3)


def test_workers_count_from_the_resume_point(order: EpochOrder) -> None:
    topology = Topology(1, 1, workers_per_rank=2, worker=0)
    batches = rank_worker_batches(order, consumed=3 * 16, global_batch_size=16, topology=topology)
    np.testing.assert_array_equal(batches.full, order.batches[3:9:2])
    np.testing.assert_array_equal(batches.last, order.tail)  # batch 9 is the 4th after 3: worker 0's
    assert batches.last_real == 6


def test_dataloader_order_is_the_rank_slice_of_every_global_batch(order: EpochOrder) -> None:
    loader = loader_batches(order, consumed=32, global_batch_size=16, topology=Topology(2, 2, 4, rank=3))
    np.testing.assert_array_equal(np.stack([batch for batch, _ in loader[:-1]]), order.batches[2:9, 12:16])
    last, real = loader[-1]  # 6 samples on 4 ranks: ranks 2 and 3 get one and repeat it
    np.testing.assert_array_equal(last, order.tail[[5, 5]])
    assert real == 1


def test_more_workers_than_batches_leaves_some_idle_without_hanging(order: EpochOrder) -> None:
    counts = [
        rank_worker_batches(
            order, consumed=8 * 16, global_batch_size=16, topology=Topology(1, 1, 4, worker=w)
        ).num_batches
        for w in range(4)
    ]
    assert counts == [1, 1, 0, 0]


def test_finished_epoch_yields_nothing(order: EpochOrder) -> None:
    for size in (16, 8):
        rest = remaining_global_batches(order, consumed=150, global_batch_size=size)
        assert rest.full.shape == (0, size) and rest.num_batches() == 0


def test_consumed_outside_the_epoch_is_a_state_error(order: EpochOrder) -> None:
    with pytest.raises(StateError, match=r"consumed: expected an int in \[0, 150\] .* found 151"):
        remaining_global_batches(order, consumed=151, global_batch_size=16)
    with pytest.raises(StateError, match=r"found -1"):
        remaining_global_batches(order, consumed=-1, global_batch_size=16)


def test_new_global_batch_size_rechunks_the_remaining_samples(order: EpochOrder) -> None:
    rest = remaining_global_batches(order, consumed=48, global_batch_size=24)  # 102 left: 4 x 24 + 6
    real = order.real_flat()[48:]
    assert rest.full.shape == (4, 24) and rest.num_batches() == 5 and rest.num_batches(drop_last=True) == 4
    np.testing.assert_array_equal(np.concatenate([rest.full.ravel(), rest.tail]), real)


def test_consumed_off_the_batch_grid_rechunks_instead_of_guessing(order: EpochOrder) -> None:
    # G went 16 -> 24 -> 16: the position (40) is no longer a multiple of 16.
    rest = remaining_global_batches(order, consumed=40, global_batch_size=16)
    np.testing.assert_array_equal(np.concatenate([rest.full.ravel(), rest.tail]), order.real_flat()[40:])


def test_resume_at_every_batch_on_every_small_layout_is_exact(order: EpochOrder) -> None:
    layouts = [Topology(1, 1, 0), Topology(1, 2, 2), Topology(2, 2, 1), Topology(2, 4, 4, replication=2)]
    for first in layouts:
        for then in layouts:
            assert_job_resumes_identically(order, [(first, 16), (then, 16)])


def test_batch_size_changes_twice_neither_skip_nor_repeat(order: EpochOrder) -> None:
    layouts = [(Topology(1, 2, 2), 16), (Topology(1, 4, 0), 8), (Topology(2, 2, 2), 12)]
    assert_job_resumes_identically(order, layouts)


def test_numpy_integers_are_accepted_as_plain_ints() -> None:
    topology = Topology(np.int64(2), np.int32(4), rank=np.int64(5))  # type: ignore[arg-type]
    assert topology == Topology(2, 4, rank=5) and type(topology.rank) is int
    assert device_batch_size(16, topology) == 2


def test_the_planned_order_is_read_only(order: EpochOrder) -> None:
    batches = rank_worker_batches(order, consumed=0, global_batch_size=16, topology=Topology())
    with pytest.raises(ValueError, match="read-only"):
        batches.full[0, 0] = 1


@pytest.mark.parametrize("r, D", [(6, 4), (5, 2), (3, 4), (8, 4), (1, 3), (7, 7)])
def test_partial_last_batch_is_spread_over_ranks_with_fewer_than_d_repeats(r: int, D: int) -> None:
    tail = np.arange(100, 100 + r)
    shares = [split_tail(tail, D, d) for d in range(D)]
    assert {len(share) for share, _ in shares} == {-(-r // D)}  # every rank: one batch of ceil(r / D)
    np.testing.assert_array_equal(np.concatenate([share[:real] for share, real in shares]), tail)
    repeats = sum(len(share) - real for share, real in shares)
    assert repeats == -(-r // D) * D - r and repeats < D
    assert all(np.isin(share[real:], tail).all() for share, real in shares)


def test_drop_last_drops_the_partial_batch_on_every_rank(order: EpochOrder) -> None:
    topology = Topology(1, 4, 2)
    rows = job_batches(order, 0, 16, topology, drop_last=True)
    assert len(rows) == 9 and all(len(row) == 16 for row in rows)
    np.testing.assert_array_equal(np.concatenate(rows), order.real_flat()[:144])
