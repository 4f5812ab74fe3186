"""Shuffle quality of the global order, in pure maths: a fresh shard order per epoch against shards that
stay on their canonical node (issue 28), and MosaicML's ``py1e`` where it can be imported.

Usage::

    python benchmarks/shuffle_quality.py [--shards 96] [--shard-size 1000] [--nodes 4] [--batch 256]
        [--algo block] [--block-size N] [--epochs 6] [--seed 9176]

Figures, for the shape given (one stream of equal shards, every sample once per epoch):

- **spread**: how far apart the samples of one shard land in the epoch. For each shard, the distance
  between its first and last sample in the epoch's order, over the epoch's length (1.0: spread over the
  whole epoch); the median and mean over shards, averaged over the epochs.
- **co-batch**: how often two samples of one shard share a global batch, over the rate of a uniform
  permutation, ``(G - 1) / (N - 1)`` (1.0: as uniform; 10: ten times likelier).
- **node mixing over E epochs** (where the change shows): the shards a shard's samples meet inside one
  canonical node's part of a global batch (what one node's ranks read together), over E epochs, as a
  fraction of all other shards. A node that keeps its shards meets only its own 1/C of them.

``fresh shard order`` is the order before issue 28, recomputed here: ``plan_epoch`` with a fresh
permutation of each group's runs every epoch (the old ``rng_for(seed, epoch, "shard_order", group)``
key), in place of ``layout.node_shard_order``. ``py1e`` needs ``mosaicml-streaming`` importable (the
peers' environment, ``.venv-peers``); without it the row says so.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from unittest import mock

import numpy as np

from stream_plugin.order import plan as plan_module
from stream_plugin.order.layout import DatasetShape, ShardRuns
from stream_plugin.order.plan import EMPTY, OrderConfig, plan_epoch
from stream_plugin.order.random import rng_for

# One epoch's order as global batches: int64 (T, G) of global sample ids, EMPTY in unused slots.
EpochBatches = Callable[[int], np.ndarray]


def fresh_shard_order(
    runs: ShardRuns, shard_range: tuple[int, int], span_begins: np.ndarray, seed: int, epoch: int, group: int
) -> ShardRuns:
    """The shard order before issue 28: a fresh permutation of the group's runs every epoch."""
    return runs.reordered(rng_for(seed, epoch, "shard_order", group).permutation(len(runs.shard)))


def ours(shape: DatasetShape, config: OrderConfig, *, fresh: bool) -> EpochBatches:
    def batches(epoch: int) -> np.ndarray:
        chosen = [np.arange(shape.num_samples, dtype=np.int64)]
        if not fresh:
            return plan_epoch(shape, chosen, config, epoch).batches
        with mock.patch.object(plan_module, "node_shard_order", fresh_shard_order):
            return plan_epoch(shape, chosen, config, epoch).batches

    return batches


def mosaicml_py1e(shape: DatasetShape, config: OrderConfig) -> EpochBatches | str:
    """MosaicML's order with ``py1e`` and its ``orig`` partition, one physical node per canonical node
    (one rank, one worker): global batch t is every node's device batch t. Or why it is not available."""
    try:
        from streaming.base.partition import get_partitions
        from streaming.base.shuffle import get_shuffle
    except ImportError as error:
        return (
            f"not measured: mosaicml-streaming is not importable ({error}). TODO: run with the peers' "
            "environment, .venv-peers/bin/python benchmarks/shuffle_quality.py (or PYTHONPATH=<a streaming "
            "checkout>)"
        )
    nodes, G = config.num_canonical_nodes, config.global_batch_size
    if G % nodes:
        return f"not measured: MosaicML needs the global batch ({G}) divisible by the nodes ({nodes})"

    def batches(epoch: int) -> np.ndarray:
        shuffle = get_shuffle(
            "py1e", shape.samples_per_shard, nodes, config.shuffle_seed, epoch, config.block_size
        )
        partition = get_partitions("orig", shape.num_samples, nodes, nodes, 1, 1, G // nodes)
        per_node = partition.reshape(nodes, -1, G // nodes)  # (C, T, G / C): node c's device batches
        ids = np.where(per_node == -1, EMPTY, shuffle[np.maximum(per_node, 0)])
        return np.concatenate(list(ids), axis=1)  # (T, G): node c's batch t in its columns

    return batches


def shard_of(shape: DatasetShape, ids: np.ndarray) -> np.ndarray:
    return np.searchsorted(shape.shard_offsets, ids, side="right") - 1


def spread(shape: DatasetShape, batches: np.ndarray) -> tuple[float, float]:
    """Median and mean over shards of (last position - first position) / epoch length."""
    flat = batches.reshape(-1)
    real = flat[flat != EMPTY]  # (N,) the epoch's samples in order
    shards = shard_of(shape, real)
    positions = np.arange(len(real))
    first = np.full(shape.num_shards, len(real), dtype=np.int64)
    last = np.full(shape.num_shards, -1, dtype=np.int64)
    np.minimum.at(first, shards, positions)
    np.maximum.at(last, shards, positions)
    read = last >= 0
    width = (last[read] - first[read]) / max(len(real) - 1, 1)
    return float(np.median(width)), float(np.mean(width))


def co_batch_ratio(shape: DatasetShape, batches: np.ndarray) -> float:
    """P(two samples of one shard share a global batch) over a uniform permutation's (G - 1) / (N - 1)."""
    T, G = batches.shape
    shards = np.where(batches == EMPTY, -1, shard_of(shape, np.maximum(batches, 0)))  # (T, G)
    rows = np.repeat(np.arange(T), G)[shards.reshape(-1) >= 0]
    counts = np.zeros((T, shape.num_shards), dtype=np.int64)  # (T, S) samples of shard s in batch t
    np.add.at(counts, (rows, shards.reshape(-1)[shards.reshape(-1) >= 0]), 1)
    same_batch = float((counts * (counts - 1) // 2).sum())
    per_shard = counts.sum(axis=0)  # (S,)
    all_pairs = float((per_shard * (per_shard - 1) // 2).sum())
    n = int(per_shard.sum())
    uniform = (G - 1) / (n - 1)
    return same_batch / all_pairs / uniform


def node_mixing(shape: DatasetShape, epochs: list[np.ndarray], nodes: int) -> float:
    """Mean over shards of the other shards met inside one canonical node's part of a global batch over
    all ``epochs``, as a fraction of the other shards."""
    S = shape.num_shards
    met = np.zeros((S, S), dtype=bool)
    for batches in epochs:
        T, G = batches.shape
        edges = np.arange(nodes + 1) * G // nodes
        for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
            part = batches[:, lo:hi]  # (T, g_c)
            shards = np.where(part == EMPTY, -1, shard_of(shape, np.maximum(part, 0)))
            for row in shards:
                present = np.unique(row[row >= 0])
                met[np.ix_(present, present)] = True
    np.fill_diagonal(met, False)
    return float(met.sum(axis=1).mean() / max(S - 1, 1))


def measure(shape: DatasetShape, config: OrderConfig, epochs: int) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    candidates: list[tuple[str, EpochBatches | str]] = [
        ("fresh shard order (before)", ours(shape, config, fresh=True)),
        ("node keeps its shards (after)", ours(shape, config, fresh=False)),
        ("MosaicML py1e", mosaicml_py1e(shape, config)),
    ]
    for name, order in candidates:
        if isinstance(order, str):
            rows.append((name, order))
            continue
        per_epoch = [order(epoch) for epoch in range(epochs)]
        spreads = np.array([spread(shape, batches) for batches in per_epoch])  # (E, 2)
        co_batch = np.mean([co_batch_ratio(shape, batches) for batches in per_epoch])
        mixing = node_mixing(shape, per_epoch, config.num_canonical_nodes)
        rows.append(
            (
                name,
                f"spread median {spreads[:, 0].mean():.3f} mean {spreads[:, 1].mean():.3f} | "
                f"co-batch {co_batch:.2f}x uniform | node mixing over {epochs} epochs {mixing:.3f}",
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=96)
    parser.add_argument("--shard-size", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=4, help="num_canonical_nodes")
    parser.add_argument("--batch", type=int, default=256, help="global batch size")
    parser.add_argument("--algo", default="block", help="shuffle_algo (our name; py1e is MosaicML's row)")
    parser.add_argument("--block-size", type=int, default=None, help="shuffle_block_size (None: default)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=9176)
    options = parser.parse_args()
    shape = DatasetShape(
        np.full(options.shards, options.shard_size), np.zeros(options.shards, dtype=np.int64)
    )
    config = OrderConfig(
        shuffle=True,
        shuffle_algo=options.algo,
        shuffle_seed=options.seed,
        shuffle_block_size=options.block_size,
        num_canonical_nodes=options.nodes,
        global_batch_size=options.batch,
    )
    print(
        f"{options.shards} shards x {options.shard_size} samples, C={options.nodes}, G={options.batch}, "
        f"shuffle_algo={options.algo}, block {config.block_size}, {options.epochs} epochs, seed {options.seed}"
    )
    for name, figures in measure(shape, config, options.epochs):
        print(f"  {name:32s} {figures}")


if __name__ == "__main__":
    main()
