"""The order of shard ids (``iter_rank_batches(shard_ids=True)``): each read's shard, from spans of shard ids
shuffled as the sample ids are, equal to looking up the shard of every sample id it reads."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from stream_plugin.order.chunked import iter_rank_batches
from stream_plugin.order.layout import AllSamples, Chosen, DatasetShape
from stream_plugin.order.plan import OrderConfig, plan_epoch
from stream_plugin.order.random import rng_for
from stream_plugin.order.shuffle import SpanKey, is_positional, register_shuffle, unregister_shuffle
from stream_plugin.order.topology import Topology

# Shards of 0 to 9 samples (empty ones among them) in two streams: a range of 40 samples crosses many runs.
SIZES = [rng_for(5, 0, "sizes", stream).integers(0, 10, count) for stream, count in enumerate((300, 120))]
SHAPE = DatasetShape(np.concatenate(SIZES), np.repeat([0, 1], [len(sizes) for sizes in SIZES]))


def _chosen(upsample: bool) -> list[Chosen]:
    chosen: list[Chosen] = []
    for stream, sizes in enumerate(SIZES):
        n = int(sizes.sum())
        if not upsample:
            chosen.append(AllSamples(n))
            continue
        extra = rng_for(1, 0, "test", stream).integers(0, n, n // 3)  # repeats and gaps, as weighted sampling
        chosen.append(np.sort(np.concatenate([np.arange(n - n // 5), extra])))
    return chosen


def _read(config: OrderConfig, chosen: list[Chosen], shard_ids: bool, **arguments: object) -> Iterator[np.ndarray]:
    return iter_rank_batches(
        SHAPE, chosen, config, 2, first_samples=5, piece_samples=arguments.pop("piece"),  # type: ignore[arg-type]
        shard_ids=shard_ids, **arguments,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("algorithm", ["none", "permute", "block", "intra_shard"])
@pytest.mark.parametrize("method", ["random", "per_stream"])
@pytest.mark.parametrize("upsample", [False, True])
def test_shard_id_pieces_are_the_shards_of_the_sample_id_pieces(algorithm: str, method: str, upsample: bool) -> None:
    chosen = _chosen(upsample)
    for nodes, G, ranks, workers, block, piece in [(2, 12, 3, 2, 25, 1 << 20), (3, 12, 2, 1, 7, 40)]:
        config = OrderConfig(
            shuffle=algorithm != "none",
            shuffle_algo=algorithm if algorithm != "none" else "block",
            shuffle_seed=11,
            shuffle_block_size=block,
            num_canonical_nodes=nodes,
            batching_method=method,  # type: ignore[arg-type]
            global_batch_size=G,
            device_batch_size=G // ranks,
        )
        total = plan_epoch(SHAPE, chosen, config, 2).num_samples
        middle = total // G // 2 * G
        # From the start, from the middle, and re-cut with another batch size (the whole-epoch path).
        recut = [(middle + 3, G // 2)] if method == "random" else []  # per_stream batches cannot be re-cut
        for consumed, batch in [(0, G), (middle, G), *recut]:
            for rank in range(ranks):
                for worker in range(workers):
                    arguments = dict(
                        consumed=consumed,
                        global_batch_size=batch,
                        topology=Topology(1, ranks, workers, rank=rank, worker=worker),
                        drop_last=False,
                        piece=piece,
                    )
                    samples = list(_read(config, chosen, False, **arguments))
                    shards = list(_read(config, chosen, True, **arguments))
                    assert [len(one) for one in shards] == [len(one) for one in samples]
                    for sample_ids, shard_ids in zip(samples, shards, strict=True):
                        looked_up = np.searchsorted(SHAPE.shard_offsets, sample_ids, side="right") - 1
                        np.testing.assert_array_equal(shard_ids, looked_up)


def _by_value(ids: np.ndarray, shard_bounds: np.ndarray, key: SpanKey) -> None:
    ids[:] = np.sort(ids)[::-1]  # a shuffle that moves each sample by its value


def test_a_shuffle_that_may_move_samples_by_value_is_not_planned_as_shard_ids() -> None:
    assert all(is_positional(name) for name in ("none", "permute", "naive", "block", "py1e", "intra_shard", "py1s"))
    register_shuffle("by_value")(_by_value)
    try:
        assert not is_positional("by_value")
        config = OrderConfig(shuffle=True, shuffle_algo="by_value", num_canonical_nodes=1, global_batch_size=4)
        with pytest.raises(ValueError, match=r"shard_ids: expected a built-in shuffle, found 'by_value'"):
            iter_rank_batches(
                SHAPE, _chosen(False), config, 0, consumed=0, global_batch_size=4, topology=Topology(), shard_ids=True
            )
    finally:
        unregister_shuffle("by_value")
