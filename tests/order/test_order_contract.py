"""The order contract, swept over many hardware layouts without processes or disk.

For each layout the job's output is rebuilt from every (rank, worker) in DataLoader order
(``whole_job.job_batches``) and compared with the layout-free global order.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from whole_job import (
    assert_job_resumes_identically,
    assert_rows_equal,
    job_batches,
    loader_batches,
    order_rows,
)

from stream_plugin.order.layout import DatasetShape
from stream_plugin.order.plan import EpochOrder, OrderConfig, plan_epoch
from stream_plugin.order.topology import Topology

NODES = (1, 2, 3, 4, 8)
RANKS_PER_NODE = (1, 2, 8)
WORKERS = (0, 1, 2, 4)
# 192 is divisible by every world size above (up to 64), so one global order serves every layout;
# the device batch size is then 192 / world (192, 96, 64, ..., 3), and 384 doubles each.
GLOBAL_BATCH_SIZES = (192, 384)
CANONICAL_NODES = 8


def uneven_shape(num_shards: int, streams: int = 1, seed: int = 0) -> DatasetShape:
    """Shards of 5..40 samples, streams of about equal shard counts."""
    sizes = np.random.default_rng(seed).integers(5, 41, num_shards)
    stream_of_shard = np.arange(num_shards) * streams // num_shards
    return DatasetShape(sizes, stream_of_shard)


def natural_chosen(shape: DatasetShape) -> list[np.ndarray]:
    """Every sample of every stream once: the natural epoch."""
    return [
        np.arange(int(shape.samples_per_shard[shape.stream_of_shard == s].sum()))
        for s in range(shape.num_streams)
    ]


def topologies(replication: int = 1) -> list[Topology]:
    layouts = []
    for nodes, ranks, workers in itertools.product(NODES, RANKS_PER_NODE, WORKERS):
        if (nodes * ranks) % replication == 0:
            layouts.append(Topology(nodes, ranks, workers, replication=replication))
    return layouts


@pytest.fixture(scope="module")
def shape() -> DatasetShape:
    return uneven_shape(200, streams=2)


@pytest.fixture(scope="module", params=GLOBAL_BATCH_SIZES)
def order(request: pytest.FixtureRequest, shape: DatasetShape) -> EpochOrder:
    config = OrderConfig(
        shuffle=True,
        shuffle_algo="block",
        shuffle_block_size=100,
        num_canonical_nodes=CANONICAL_NODES,
        global_batch_size=request.param,
    )
    return plan_epoch(shape, natural_chosen(shape), config, epoch=3)


def test_every_layout_yields_the_layout_free_global_batches(order: EpochOrder) -> None:
    for topology in topologies():
        rebuilt = job_batches(order, 0, order.global_batch_size, topology)
        assert_rows_equal(rebuilt, order_rows(order), err_msg=str(topology))


def test_replication_groups_read_identical_batches(order: EpochOrder) -> None:
    # job_batches asserts every rank equals its group leader; the glued result is still the order.
    for topology in topologies(replication=2) + topologies(replication=8):
        assert_rows_equal(job_batches(order, 0, order.global_batch_size, topology), order_rows(order))


def test_natural_epoch_has_every_sample_once_and_no_repeats(order: EpochOrder, shape: DatasetShape) -> None:
    np.testing.assert_array_equal(np.sort(order.real_flat()), np.arange(shape.num_samples))
    assert order.num_padded == order.batches.size - shape.num_samples
    assert 0 <= order.num_padded < order.global_batch_size
    # Empty slots sit in the last global batch only, and hold no sample.
    assert np.all(order.pad_positions >= (order.num_batches - 1) * order.global_batch_size)
    assert np.all(order.batches.reshape(-1)[order.pad_positions] == -1)
    assert len(order.tail) == shape.num_samples % order.global_batch_size


def test_order_ignores_layout_and_depends_on_the_epoch(shape: DatasetShape) -> None:
    config = OrderConfig(shuffle=True, num_canonical_nodes=4, global_batch_size=64, shuffle_block_size=50)
    again = plan_epoch(shape, natural_chosen(shape), config, epoch=2)
    first = plan_epoch(shape, natural_chosen(shape), config, epoch=2)
    np.testing.assert_array_equal(again.batches, first.batches)
    other_epoch = plan_epoch(shape, natural_chosen(shape), config, epoch=3)
    assert not np.array_equal(other_epoch.batches, first.batches)


def node_shard_pairs(order: EpochOrder, shape: DatasetShape, topology: Topology) -> int:
    """Distinct (physical node, shard) pairs read in one epoch: the shard downloads of the job."""
    shard_starts = shape.shard_offsets[1:]  # (num_shards,)
    G = order.global_batch_size
    pairs = 0
    for node in range(topology.num_nodes):
        ranks = range(node * topology.ranks_per_node, (node + 1) * topology.ranks_per_node)
        samples = np.concatenate(
            [
                batch
                for r in ranks
                for batch, _ in loader_batches(
                    order, consumed=0, global_batch_size=G, topology=topology.with_position(r)
                )
            ]
        )
        pairs += len(np.unique(np.searchsorted(shard_starts, samples, side="right")))
    return pairs


@pytest.mark.parametrize("algo", ["block", "permute", "intra_shard", "none"])
@pytest.mark.parametrize("canonical_nodes", [4, 8])
def test_nodes_dividing_canonical_nodes_download_each_shard_about_once(
    algo: str, canonical_nodes: int
) -> None:
    shape = uneven_shape(200, streams=1, seed=1)
    config = OrderConfig(
        shuffle=True,
        shuffle_algo=algo,
        shuffle_block_size=64,
        num_canonical_nodes=canonical_nodes,
        global_batch_size=64,
    )
    order = plan_epoch(shape, natural_chosen(shape), config, epoch=0)
    for nodes in (1, 2, 4, 8):
        if canonical_nodes % nodes:
            continue
        pairs = node_shard_pairs(order, shape, Topology(nodes, 2, 0))
        assert pairs <= 1.1 * shape.num_shards, (nodes, pairs)


@pytest.mark.parametrize(
    "first, then",
    [
        (Topology(1, 1, 0), Topology(2, 8, 4)),
        (Topology(4, 2, 2), Topology(1, 8, 0)),
        (Topology(3, 8, 1), Topology(8, 2, 2, replication=2)),
    ],
    ids=["grow", "shrink", "odd-to-replicated"],
)
def test_resuming_on_another_layout_continues_the_same_batches(
    order: EpochOrder, first: Topology, then: Topology
) -> None:
    G = order.global_batch_size
    assert_job_resumes_identically(order, [(first, G), (then, G)])


def test_resume_after_resume_on_three_layouts_is_exact(order: EpochOrder) -> None:
    G = order.global_batch_size
    layouts = [(Topology(2, 2, 2), G), (Topology(1, 8, 4), G), (Topology(8, 1, 0), G)]
    assert_job_resumes_identically(order, layouts)


def test_changed_global_batch_size_neither_skips_nor_repeats(order: EpochOrder) -> None:
    G = order.global_batch_size
    assert_job_resumes_identically(order, [(Topology(2, 2, 2), G), (Topology(1, 8, 1), 96)])
    assert_job_resumes_identically(
        order, [(Topology(1, 1, 0), G), (Topology(4, 8, 2), 2 * G), (Topology(1, 1, 4), G)]
    )
