"""A million-shard stream's runs cost one fresh array: views of the shape's offsets, broadcast constants,
ids filled in place; the values are those of the general gather."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.order.layout import AllSamples, DatasetShape, ShardRuns, group_runs, node_shard_order
from stream_plugin.order.shuffle import SpanKey
from stream_plugin.order.span_reader import SpanReader

SIZES = [[3, 0, 4, 1, 0, 5, 9, 2, 6, 5] * 12, [0, 5, 3, 5] * 20]  # empty shards in both streams


def _shape(shard_sizes: list[list[int]]) -> DatasetShape:
    sizes = np.concatenate([np.asarray(s, dtype=np.int64) for s in shard_sizes])
    streams = np.concatenate([np.full(len(s), i, dtype=np.int64) for i, s in enumerate(shard_sizes)])
    return DatasetShape(sizes, streams)


def _expected(runs: ShardRuns) -> np.ndarray:
    """Every run's ids, one run at a time: int64 (num_samples,)."""
    return np.concatenate(
        [np.zeros(0, np.int64)]
        + [
            np.asarray(runs.chosen[int(s)][int(a) : int(b)]) + int(o)
            for s, a, b, o in zip(runs.stream, runs.start, runs.stop, runs.id_offset, strict=True)
        ]
    )


def test_shape_keeps_int64_counts_without_a_copy_and_computes_offsets_once() -> None:
    counts = np.array([4, 0, 3], dtype=np.int64)
    counts.setflags(write=False)  # as a view of the kept parse is
    shape = DatasetShape(counts, np.zeros(3, np.int64))
    assert shape.samples_per_shard is counts
    assert shape.shard_offsets is shape.shard_offsets
    assert shape.shard_offsets.tolist() == [0, 4, 4, 7] and not shape.shard_offsets.flags.writeable


def test_one_streams_runs_are_views_of_the_shard_offsets() -> None:
    shape = DatasetShape(np.array([3, 1, 4, 1, 5], np.int64), np.zeros(5, np.int64))
    runs = group_runs(shape, [AllSamples(14)], [0])
    for column in (runs.cum, runs.start, runs.stop):
        assert np.shares_memory(column, shape.shard_offsets)
    assert runs.stream.strides == runs.id_offset.strides == (0,)  # broadcast constants
    assert (runs.start.tolist(), runs.stop.tolist(), runs.shard.tolist()) == ([0, 3, 4, 8, 9], [3, 4, 8, 9, 14], [0, 1, 2, 3, 4])
    assert (runs.stream.tolist(), runs.id_offset.tolist()) == ([0] * 5, [0] * 5)


def test_runs_of_a_later_stream_skip_its_empty_shards_and_offset_its_ids() -> None:
    shape = _shape([[2, 2], [0, 3, 0, 1]])
    runs = group_runs(shape, [AllSamples(4), AllSamples(4)], [1])
    assert (runs.shard.tolist(), runs.start.tolist(), runs.stop.tolist()) == ([3, 5], [0, 3], [3, 4])
    assert runs.id_offset.tolist() == [4, 4] and runs.cum.tolist() == [0, 3, 4]
    out = np.empty(4, np.int64)
    runs.copy_range(0, 4, out)
    assert out.tolist() == [4, 5, 6, 7]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shuffled", [False, True])
def test_many_counting_runs_fill_the_ids_of_the_one_by_one_gather(dtype: type, shuffled: bool) -> None:
    """Past 64 runs of ``AllSamples`` streams ``copy_range`` fills ids with one running sum in place."""
    shape = _shape(SIZES)
    chosen = [AllSamples(int(np.sum(sizes))) for sizes in SIZES]
    runs = group_runs(shape, chosen, [0, 1])
    if shuffled:
        cuts = np.linspace(0, runs.num_samples, 4).astype(np.int64)  # 3 nodes: runs cut into pieces
        runs = node_shard_order(runs, (0, shape.num_shards), cuts, seed=11, epoch=3, group=0)
    expected = _expected(runs)
    ranges = [(0, runs.num_samples), (1, runs.num_samples - 1), (250, 600), (17, 18), (400, 400)]
    for begin, end in ranges:
        out = np.empty(end - begin, dtype=dtype)
        bounds = runs.copy_range(begin, end, out)
        np.testing.assert_array_equal(out, expected[begin:end])
        assert bounds[0] == 0 and bounds[-1] == end - begin


def test_a_mix_of_id_arrays_and_all_samples_gathers_as_before() -> None:
    shape = _shape(SIZES)
    ids = np.sort(np.concatenate([np.arange(0, 335, 2), np.arange(0, 335, 7)]))  # repeats and gaps
    natural = group_runs(shape, [ids, AllSamples(260)], [0, 1])
    cuts = np.array([0, 101, 202, natural.num_samples])  # 3 nodes: runs cut into pieces
    runs = node_shard_order(natural, (0, shape.num_shards), cuts, seed=2, epoch=0, group=0)
    out = np.empty(runs.num_samples, np.int64)
    runs.copy_range(0, runs.num_samples, out)
    np.testing.assert_array_equal(out, _expected(runs))


def test_an_unshuffled_span_copies_only_what_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """No piece is decoded ahead: the first sample of a long unshuffled span copies a few ids."""
    shape = _shape([[10] * 100_000])
    runs = group_runs(shape, [AllSamples(1_000_000)], [0])
    copied: list[int] = []
    original = ShardRuns.copy_range

    def counting(self: ShardRuns, begin: int, end: int, out: np.ndarray) -> np.ndarray:
        copied.append(end - begin)
        return original(self, begin, end, out)

    monkeypatch.setattr(ShardRuns, "copy_range", counting)
    reader = SpanReader(runs, 5, 999_995, SpanKey(0, 0, (0, 0), 1), "none", np.dtype(np.int32))
    assert reader.read(3).tolist() == [5, 6, 7]
    reader.skip(500_000)
    assert reader.read(2).tolist() == [500_008, 500_009]
    assert copied == [3, 2]
