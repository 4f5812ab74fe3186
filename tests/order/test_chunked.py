"""Chunked planning (``order.chunked``) gives every (rank, worker) exactly what slicing the whole order gives."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.errors import StateError
from stream_plugin.order.chunked import iter_rank_batches, plan_rank_batches
from stream_plugin.order.layout import AllSamples, DatasetShape, group_runs, node_shard_order
from stream_plugin.order.partition import RankBatches, rank_last_size, rank_worker_batches, split_tail
from stream_plugin.order.plan import OrderConfig, plan_epoch
from stream_plugin.order.random import rng_for
from stream_plugin.order.shuffle import SpanKey, get_shuffle
from stream_plugin.order.span_reader import SpanReader
from stream_plugin.order.topology import Topology

ALGORITHMS = ("none", "permute", "block", "intra_shard")
METHODS = ("random", "stratified", "per_stream", "device_per_stream")


def _shape(shard_sizes: list[list[int]]) -> DatasetShape:
    sizes = np.concatenate([np.asarray(s, dtype=np.int64) for s in shard_sizes])
    streams = np.concatenate([np.full(len(s), i, dtype=np.int64) for i, s in enumerate(shard_sizes)])
    return DatasetShape(sizes, streams)


def _chosen(shape: DatasetShape, upsample: bool) -> list[np.ndarray]:
    chosen = []
    for stream in range(shape.num_streams):
        first, stop = shape.stream_shard_range(stream)
        n = int(shape.samples_per_shard[first:stop].sum())
        ids = np.arange(n, dtype=np.int64)
        if upsample:  # repeats and gaps, as weighted sampling gives
            extra = rng_for(1, 0, "test", stream).integers(0, n, n // 3)
            ids = np.sort(np.concatenate([ids[: n - n // 5], extra]))
        chosen.append(ids)
    return chosen


def _topologies(ranks: int, workers: int) -> list[Topology]:
    return [
        Topology(num_nodes=1, ranks_per_node=ranks, workers_per_rank=workers, rank=rank, worker=worker)
        for rank in range(ranks)
        for worker in range(max(workers, 1))
    ]


def _assert_same(chunked: RankBatches, whole: RankBatches) -> None:
    np.testing.assert_array_equal(chunked.full, whole.full)
    np.testing.assert_array_equal(chunked.last, whole.last)
    assert chunked.last_real == whole.last_real


def _compare(shape, chosen, config, epoch, *, consumed, ranks, workers, drop_last, piece) -> None:  # type: ignore[no-untyped-def]
    order = plan_epoch(shape, chosen, config, epoch)
    for topology in _topologies(ranks, workers):
        arguments = dict(
            consumed=consumed,
            global_batch_size=config.global_batch_size,
            topology=topology,
            drop_last=drop_last,
        )
        whole = rank_worker_batches(order, **arguments)  # type: ignore[arg-type]
        chunked = plan_rank_batches(shape, chosen, config, epoch, piece_samples=piece, **arguments)  # type: ignore[arg-type]
        _assert_same(chunked, whole)
        _assert_same_in_pieces(shape, chosen, config, epoch, whole, piece=piece, **arguments)


def _assert_same_in_pieces(shape, chosen, config, epoch, whole, *, piece, **arguments) -> None:  # type: ignore[no-untyped-def]
    """``iter_rank_batches`` yields ``whole.flat()`` in pieces, from a first piece of 3 samples (so a pass has many pieces)."""
    for first in (3,):
        pieces = list(
            iter_rank_batches(shape, chosen, config, epoch, piece_samples=piece, first_samples=first, **arguments)
        )
        np.testing.assert_array_equal(np.concatenate([np.zeros(0, np.int64), *pieces]), whole.flat())


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("method", METHODS)
def test_chunked_planning_matches_whole_planning(algorithm: str, method: str) -> None:
    shape = _shape([[37, 5, 120, 64, 1, 90], [50, 50, 33], [200, 7]])
    for nodes, G, ranks, workers, block, upsample, piece in [
        (1, 12, 3, 0, 40, False, 7),
        (3, 12, 2, 2, 17, True, 50),
        (4, 8, 4, 3, 1000, False, 1 << 20),
        (5, 20, 2, 1, 3, True, 13),
        (2, 6, 6, 2, 64, False, 5),
    ]:
        device = G // ranks
        config = OrderConfig(
            shuffle=algorithm != "none",
            shuffle_algo=algorithm if algorithm != "none" else "block",
            shuffle_seed=7 + nodes,
            shuffle_block_size=block,
            num_canonical_nodes=nodes,
            batching_method=method,  # type: ignore[arg-type]
            global_batch_size=G,
            device_batch_size=device,
        )
        chosen = _chosen(shape, upsample)
        total = plan_epoch(shape, chosen, config, 3).num_samples
        middle = total // G // 2 * G
        for consumed, drop_last in [(0, False), (0, True), (middle, False), (total // G * G, False)]:
            _compare(
                shape,
                chosen,
                config,
                3,
                consumed=consumed,
                ranks=ranks,
                workers=workers,
                drop_last=drop_last,
                piece=piece,
            )


@pytest.mark.parametrize("algorithm", ["block", "intra_shard"])
def test_chunked_planning_matches_whole_planning_with_many_segments(algorithm: str) -> None:
    """Past 4096 segments a span is shuffled by one vectorised sort; chunks and skips must draw alike."""
    shape = _shape([[2, 3, 1, 2] * 1500])  # 6000 shards of 1-3 samples
    config = OrderConfig(
        shuffle=True,
        shuffle_algo=algorithm,
        shuffle_block_size=2,
        num_canonical_nodes=1,
        global_batch_size=10,
    )
    chosen = [AllSamples(int(shape.num_samples))]
    for consumed in (0, 4000, 11990):
        _compare(shape, chosen, config, 1, consumed=consumed, ranks=2, workers=2, drop_last=False, piece=999)


def test_chunked_planning_matches_whole_planning_after_a_batch_size_change() -> None:
    shape = _shape([[100, 50, 77]])
    config = OrderConfig(shuffle=True, num_canonical_nodes=2, global_batch_size=8, shuffle_block_size=30)
    chosen = [np.arange(227)]
    order = plan_epoch(shape, chosen, config, 0)
    for consumed, G in ((13, 8), (16, 12), (3, 6)):
        for topology in _topologies(2, 2):
            arguments = dict(consumed=consumed, global_batch_size=G, topology=topology)
            whole = rank_worker_batches(order, **arguments)  # type: ignore[arg-type]
            _assert_same(plan_rank_batches(shape, chosen, config, 0, **arguments), whole)  # type: ignore[arg-type]
            _assert_same_in_pieces(shape, chosen, config, 0, whole, piece=1 << 21, **arguments)


def test_all_samples_plans_like_the_id_array() -> None:
    shape = _shape([[30, 40], [25]])
    config = OrderConfig(shuffle=True, num_canonical_nodes=2, global_batch_size=6, shuffle_block_size=9)
    ids = [np.arange(70), np.arange(25)]
    lazy = [AllSamples(70), AllSamples(25)]
    np.testing.assert_array_equal(
        plan_epoch(shape, lazy, config, 2).batches, plan_epoch(shape, ids, config, 2).batches
    )


def test_all_samples_of_the_wrong_size_is_refused() -> None:
    shape = _shape([[30, 40]])
    with pytest.raises(Exception, match=r"expected AllSamples\(70\).*found AllSamples\(69\)"):
        plan_epoch(shape, [AllSamples(69)], OrderConfig(), 0)


def test_chunked_planning_refuses_a_position_past_the_epoch() -> None:
    shape = _shape([[10]])
    with pytest.raises(StateError, match=r"consumed: expected an int in \[0, 10\]"):
        plan_rank_batches(
            shape,
            [np.arange(10)],
            OrderConfig(global_batch_size=2),
            0,
            consumed=12,
            global_batch_size=2,
            topology=Topology(),
        )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_span_reader_skip_then_read_matches_the_whole_shuffled_span(algorithm: str) -> None:
    shape = _shape([[7, 30, 2, 55, 11, 40]])
    runs = group_runs(shape, [AllSamples(145)], [0])
    key = SpanKey(seed=3, epoch=1, span=(0, 0), block_size=9)
    whole = np.empty(120, dtype=np.int64)
    bounds = runs.copy_range(20, 140, whole)
    get_shuffle(algorithm)(whole, bounds, key)
    for skip, read, piece in [(0, 120, 10), (37, 50, 4), (100, 20, 1000), (119, 1, 3)]:
        reader = SpanReader(runs, 20, 140, key, algorithm, np.dtype(np.int64), piece_samples=piece)
        reader.skip(skip)
        np.testing.assert_array_equal(reader.read(read), whole[skip : skip + read])
        assert reader.position == skip + read


@pytest.mark.parametrize("tail_size", [1, 5, 8, 13])
def test_rank_last_size_matches_split_tail(tail_size: int) -> None:
    tail = np.arange(tail_size)
    for ranks in (1, 3, 4, 8):
        for rank in range(ranks):
            last, real = split_tail(tail, ranks, rank)
            assert rank_last_size(tail_size, ranks, rank) == (len(last), real)


@pytest.mark.parametrize("lazy", [False, True])
def test_copy_range_of_many_runs_matches_the_runs_one_by_one(lazy: bool) -> None:
    """Past 64 runs ``copy_range`` gathers with whole-array operations; the ids must be the loop's."""
    sizes = [[3, 1, 4, 1, 5, 9, 2, 6] * 20, [5, 3, 5] * 30]
    shape = _shape(sizes)
    chosen: list = [AllSamples(int(np.sum(s))) for s in sizes] if lazy else _chosen(shape, upsample=True)  # type: ignore[type-arg]
    natural = group_runs(shape, chosen, [0, 1])
    cuts = np.linspace(0, natural.num_samples, 4).astype(np.int64)  # 3 nodes: runs cut into pieces
    runs = node_shard_order(natural, (0, shape.num_shards), cuts, seed=5, epoch=0, group=0)
    expected = np.concatenate(
        [
            np.asarray(chosen[int(s)][int(a) : int(b)]) + int(o)
            for s, a, b, o in zip(runs.stream, runs.start, runs.stop, runs.id_offset, strict=True)
        ]
    )
    for begin, end in [(0, runs.num_samples), (7, runs.num_samples - 3), (100, 400), (2, 5)]:
        out = np.empty(end - begin, dtype=np.int32)
        bounds = runs.copy_range(begin, end, out)
        np.testing.assert_array_equal(out, expected[begin:end])
        assert bounds[0] == 0 and bounds[-1] == end - begin


def test_the_first_piece_of_a_long_pass_plans_only_its_own_samples() -> None:
    """Asking for the first sample of a 1M-sample pass reads about ``first_samples`` ids from the spans."""
    shape = _shape([[1000] * 1000])
    config = OrderConfig(shuffle=True, shuffle_algo="block", num_canonical_nodes=2, global_batch_size=8)
    read: list[int] = []
    original = SpanReader.read

    def counting(self: SpanReader, count: int) -> np.ndarray:
        read.append(count)
        return original(self, count)

    pieces = iter_rank_batches(
        shape, [AllSamples(1_000_000)], config, 0, consumed=0, global_batch_size=8, topology=Topology(),
        piece_samples=1 << 16, first_samples=1 << 10,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SpanReader, "read", counting)
        first = next(pieces)
        assert len(first) == 1 << 10
        assert 0 < sum(read) <= 1 << 17  # a span chunk per node, not the pass's million samples
        rest = np.concatenate([first, *pieces])
    assert sum(read) == 1_000_000 and np.array_equal(np.sort(rest), np.arange(1_000_000))
