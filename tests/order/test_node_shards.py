"""A canonical node keeps its shards across epochs: only the order inside its span changes.

Pure maths, no disk: each canonical node's shards are read off the epoch's global order (its slot
columns), the way a node with a cache that holds its share would download them.
"""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.order.layout import DatasetShape, slot_ranges
from stream_plugin.order.plan import EMPTY, EpochOrder, OrderConfig, plan_epoch
from stream_plugin.order.sampling import SamplingMethod, epoch_samples

SEED = 5


def mixed_shape() -> DatasetShape:
    """Three streams of uneven shards (40..400 samples), 60 shards in all."""
    sizes = np.random.default_rng(1).integers(40, 401, 60)
    return DatasetShape(sizes, np.repeat([0, 1, 2], 20))


def stream_sizes(shape: DatasetShape) -> list[int]:
    return [int(shape.samples_per_shard[shape.stream_of_shard == s].sum()) for s in range(shape.num_streams)]


def chosen_for(
    shape: DatasetShape, counts: list[int], epoch: int, method: SamplingMethod = "fixed"
) -> list[np.ndarray]:
    per_stream = [shape.samples_per_shard[shape.stream_of_shard == s] for s in range(shape.num_streams)]
    return epoch_samples(
        stream_sizes(shape), counts, per_stream, method=method, granularity=1, seed=SEED, epoch=epoch
    )


def node_shards(shape: DatasetShape, order: EpochOrder, num_canonical_nodes: int) -> list[set[int]]:
    """The shards each canonical node reads in ``order``: its slot columns' samples, by shard."""
    edges = slot_ranges(order.global_batch_size, num_canonical_nodes).tolist()
    sets = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        ids = order.batches[:, lo:hi].ravel()  # (T * g_c,)
        ids = ids[ids != EMPTY]
        shards = np.searchsorted(shape.shard_offsets, ids, side="right") - 1
        sets.append(set(np.unique(shards).tolist()))
    return sets


def config(num_canonical_nodes: int, algo: str = "block", **changes: object) -> OrderConfig:
    settings: dict = {
        "shuffle": True,
        "shuffle_algo": algo,
        "shuffle_seed": SEED,
        "shuffle_block_size": 100,
        "num_canonical_nodes": num_canonical_nodes,
        "global_batch_size": 48,
        **changes,
    }
    return OrderConfig(**settings)


def every_epochs_node_shards(
    shape: DatasetShape, counts: list[int], cfg: OrderConfig, epochs: int, method: SamplingMethod = "fixed"
) -> list[list[set[int]]]:
    """``[epoch][node]``: the shards each canonical node reads in each epoch."""
    return [
        node_shards(
            shape,
            plan_epoch(shape, chosen_for(shape, counts, epoch, method), cfg, epoch),
            cfg.num_canonical_nodes,
        )
        for epoch in range(epochs)
    ]


@pytest.mark.parametrize("num_canonical_nodes", [2, 3, 4, 8])
@pytest.mark.parametrize("algo", ["block", "intra_shard", "permute"])
@pytest.mark.parametrize(
    "weights",
    ["every sample", "choose: one stream cut, one repeated", "epoch_size: a fixed subset"],
)
def test_each_canonical_node_reads_the_same_shards_every_epoch(
    num_canonical_nodes: int, algo: str, weights: str
) -> None:
    shape = mixed_shape()
    sizes = stream_sizes(shape)
    counts = {
        "every sample": sizes,
        "choose: one stream cut, one repeated": [sizes[0] // 3, sizes[1], 2 * sizes[2] + 17],
        "epoch_size: a fixed subset": [size * 3 // 5 for size in sizes],
    }[weights]
    per_epoch = every_epochs_node_shards(shape, counts, config(num_canonical_nodes, algo), epochs=4)
    for epoch in range(1, 4):
        assert per_epoch[epoch] == per_epoch[0], f"epoch {epoch}"
    assert sum(map(len, per_epoch[0])) <= shape.num_shards + num_canonical_nodes - 1  # a few cut shards


@pytest.mark.parametrize("num_canonical_nodes", [2, 4])
@pytest.mark.parametrize("method", ["stratified", "per_stream", "device_per_stream"])
def test_each_node_keeps_its_shards_under_every_batching_method(
    num_canonical_nodes: int, method: str
) -> None:
    """Per-stream groups: a node keeps each stream's shards. The slot draws move a cut by a few samples
    (stratified), or hand the samples a whole-batch method leaves out to other shards of the last
    node: a node may touch at most a neighbour's shard per cut more."""
    shape = mixed_shape()
    cfg = config(num_canonical_nodes, batching_method=method, device_batch_size=12)
    per_epoch = every_epochs_node_shards(shape, stream_sizes(shape), cfg, epochs=4)
    first = per_epoch[0]
    for sets in per_epoch[1:]:
        for node, (now, then) in enumerate(zip(sets, first, strict=True)):
            assert len(now - then) <= 2 * shape.num_streams, f"node {node}: {sorted(now - then)}"


@pytest.mark.parametrize("algo", ["block", "intra_shard", "permute"])
def test_order_inside_a_node_changes_every_epoch(algo: str) -> None:
    shape = mixed_shape()
    cfg = config(4, algo)
    edges = slot_ranges(cfg.global_batch_size, 4).tolist()
    orders = [
        plan_epoch(shape, chosen_for(shape, stream_sizes(shape), epoch), cfg, epoch) for epoch in range(3)
    ]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        reads = [order.batches[:, lo:hi].ravel() for order in orders]  # the node's samples, in read order
        reads = [read[read != EMPTY] for read in reads]
        assert sorted(reads[0].tolist()) == sorted(reads[1].tolist()) == sorted(reads[2].tolist())
        assert reads[0].tolist() != reads[1].tolist() and reads[1].tolist() != reads[2].tolist()
        # The order in which the node first meets its shards changes too, not only the samples.
        shard_orders = {
            tuple(dict.fromkeys((np.searchsorted(shape.shard_offsets, read, side="right") - 1).tolist()))
            for read in reads
        }
        assert len(shard_orders) == 3


@pytest.mark.parametrize("num_canonical_nodes", [2, 4, 8])
def test_six_epochs_download_what_one_epoch_does(num_canonical_nodes: int) -> None:
    """Egress, in pure maths: 96 shards of 1,000 samples, one physical node per canonical node with a
    cache that holds its share. The shards a node reads over 6 epochs are its epoch-0 shards (the issue's
    target: at most 1.05 times one epoch's; a fresh shard order per epoch gave up to 3.3 times)."""
    shape = DatasetShape(np.full(96, 1000), np.zeros(96, dtype=np.int64))
    cfg = config(num_canonical_nodes, shuffle_block_size=None, global_batch_size=256)
    per_epoch = every_epochs_node_shards(shape, [96_000], cfg, epochs=6)
    one_epoch = sum(map(len, per_epoch[0]))
    unions = [set().union(*(sets[node] for sets in per_epoch)) for node in range(num_canonical_nodes)]
    assert sum(map(len, unions)) <= 1.05 * one_epoch
    assert one_epoch <= 96 + num_canonical_nodes - 1


@pytest.mark.parametrize("num_canonical_nodes", [2, 4, 8])
def test_a_balanced_sub_sample_keeps_most_of_a_nodes_shards(num_canonical_nodes: int) -> None:
    """``epoch_size`` half the data, ``balanced``: the chosen counts per shard change every epoch, so a
    node's cuts move by a few samples and a shard near a cut may change node. Measured: 1.01, 1.03, 1.07
    times one epoch's downloads over 6 epochs for 2, 4, 8 nodes (12 shards a node at 8)."""
    shape = DatasetShape(np.full(96, 1000), np.zeros(96, dtype=np.int64))
    cfg = config(num_canonical_nodes, shuffle_block_size=None, global_batch_size=256)
    per_epoch = every_epochs_node_shards(shape, [48_000], cfg, epochs=6, method="balanced")
    one_epoch = sum(map(len, per_epoch[0]))
    unions = [set().union(*(sets[node] for sets in per_epoch)) for node in range(num_canonical_nodes)]
    assert sum(map(len, unions)) <= one_epoch + num_canonical_nodes  # at most a shard more per node
