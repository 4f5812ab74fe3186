"""Layout: dataset shape, shard runs, shuffled shard order, canonical-node spans and padding placement."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.order.layout import DatasetShape, group_runs, shuffled_shard_order, slot_ranges
from stream_plugin.order.plan import OrderConfig, plan_epoch

SIZES = np.array([4, 0, 3, 5, 2, 6, 1])  # shard 1 is empty
STREAMS = np.array([0, 0, 0, 0, 1, 1, 1])  # stream 0: 12 samples, stream 1: 9 samples


def shape() -> DatasetShape:
    return DatasetShape(SIZES, STREAMS)


def test_shape_offsets_and_stream_ranges() -> None:
    s = shape()
    assert s.shard_offsets.tolist() == [0, 4, 4, 7, 12, 14, 20, 21]
    assert (s.num_shards, s.num_streams, s.num_samples) == (7, 2, 21)
    assert s.stream_shard_range(1) == (4, 7)


def test_shape_rejects_streams_out_of_order() -> None:
    with pytest.raises(
        ConfigError, match=r"non-decreasing order.*concatenate the streams' shards in stream order"
    ):
        DatasetShape(np.array([1, 1, 1]), np.array([0, 1, 0]))


def test_shape_rejects_mismatched_lengths() -> None:
    with pytest.raises(ConfigError, match=r"same 1-D shape, found \(3,\) and \(2,\)"):
        DatasetShape(np.array([1, 1, 1]), np.array([0, 0]))


def test_runs_map_stream_local_ids_to_global_ids_shard_by_shard() -> None:
    chosen = [np.array([0, 0, 3, 4, 11]), np.array([1, 2, 8])]  # repeats (upsampling) stay in their shard
    runs = group_runs(shape(), chosen, [0, 1])
    assert runs.shard.tolist() == [0, 2, 3, 4, 5, 6]
    out = np.empty(runs.num_samples, dtype=np.int64)
    bounds = runs.copy_range(0, runs.num_samples, out)
    assert out.tolist() == [0, 0, 3, 4, 11, 13, 14, 20]
    assert bounds.tolist() == [0, 3, 4, 5, 6, 7, 8]


def test_copy_range_agrees_with_slicing_the_whole_sequence() -> None:
    chosen = [np.arange(12), np.arange(9)]
    runs = shuffled_shard_order(group_runs(shape(), chosen, [0, 1]), seed=3, epoch=2, group=0)
    whole = np.empty(runs.num_samples, dtype=np.int64)
    runs.copy_range(0, runs.num_samples, whole)
    for begin in range(runs.num_samples + 1):
        for end in range(begin, runs.num_samples + 1):
            part = np.empty(end - begin, dtype=np.int32)
            runs.copy_range(begin, end, part)
            assert part.tolist() == whole[begin:end].tolist()


def test_shard_order_is_a_fresh_permutation_each_epoch() -> None:
    runs = group_runs(DatasetShape(np.full(50, 3), np.zeros(50, dtype=np.int64)), [np.arange(150)], [0])
    first = shuffled_shard_order(runs, seed=1, epoch=0, group=0).shard
    second = shuffled_shard_order(runs, seed=1, epoch=1, group=0).shard
    assert sorted(first.tolist()) == list(range(50))
    assert first.tolist() != second.tolist()
    np.testing.assert_array_equal(first, shuffled_shard_order(runs, seed=1, epoch=0, group=0).shard)


def test_unsorted_chosen_ids_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"chosen_per_stream\[1\]: expected ids sorted ascending.*np.sort"):
        group_runs(shape(), [np.arange(12), np.array([3, 1])], [0, 1])


def test_global_ids_in_place_of_local_ones_are_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"chosen_per_stream\[1\]: expected ids in \[0, 9\), found range \[12, 20\]"
    ):
        group_runs(shape(), [np.arange(12), np.arange(12, 21)], [0, 1])


def test_one_chosen_array_per_stream_is_required() -> None:
    with pytest.raises(ConfigError, match=r"expected one array per stream \(2\), found 1"):
        plan_epoch(shape(), [np.arange(12)], OrderConfig(), epoch=0)


def test_canonical_node_slots_are_floor_c_g_over_c() -> None:
    assert slot_ranges(10, 4).tolist() == [0, 2, 5, 7, 10]
    assert slot_ranges(3, 5).tolist() == [0, 0, 1, 1, 2, 3]  # more nodes than slots: some own none


def test_unshuffled_spans_are_consecutive_runs_of_the_dataset() -> None:
    s = DatasetShape(np.full(10, 10), np.zeros(10, dtype=np.int64))
    order = plan_epoch(s, [np.arange(100)], OrderConfig(num_canonical_nodes=4, global_batch_size=8), epoch=0)
    edges = slot_ranges(8, 4)
    is_pad = np.zeros(order.batches.shape, dtype=bool)
    is_pad.reshape(-1)[order.pad_positions] = True
    spans = [order.batches[:, lo:hi][~is_pad[:, lo:hi]] for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    # Node c reads the c-th quarter of the dataset, in order: whole shards except at the cuts.
    np.testing.assert_array_equal(np.concatenate(spans), np.arange(100))
    assert [len(span) for span in spans] == [25, 25, 25, 25]


def test_no_canonical_node_runs_dry_before_the_last_batch() -> None:
    s = DatasetShape(np.array([7, 13, 5, 9, 11]), np.zeros(5, dtype=np.int64))  # 45 samples
    config = OrderConfig(shuffle=True, shuffle_algo="permute", num_canonical_nodes=3, global_batch_size=8)
    order = plan_epoch(s, [np.arange(45)], config, epoch=0)
    assert order.batches.shape == (6, 8) and order.num_padded == 3
    # Empty slots sit only in the last batch, at the tail of the canonical nodes' slot ranges.
    last_row = order.pad_positions - 5 * 8
    assert np.all(last_row >= 0)
    edges = slot_ranges(8, 3)  # [0, 2, 5, 8]
    node_of_pad = np.searchsorted(edges, last_row, side="right") - 1
    for node, slot in zip(node_of_pad.tolist(), last_row.tolist(), strict=True):
        assert slot >= edges[node + 1] - np.count_nonzero(node_of_pad == node)


def test_empty_slots_hold_no_sample() -> None:
    s = DatasetShape(np.array([7, 13, 5, 9, 11]), np.zeros(5, dtype=np.int64))
    config = OrderConfig(shuffle=True, shuffle_algo="permute", num_canonical_nodes=3, global_batch_size=8)
    order = plan_epoch(s, [np.arange(45)], config, epoch=0)
    assert np.all(order.batches.reshape(-1)[order.pad_positions] == -1)
    assert sorted(order.real_flat().tolist()) == list(range(45))
    assert order.full_batches == 5 and len(order.tail) == 5


def test_tiny_epoch_smaller_than_one_batch_is_one_partial_batch() -> None:
    s = DatasetShape(np.array([2, 1]), np.array([0, 0]))
    order = plan_epoch(s, [np.arange(3)], OrderConfig(num_canonical_nodes=4, global_batch_size=8), epoch=0)
    assert order.batches.shape == (1, 8) and order.num_padded == 5
    assert sorted(order.tail.tolist()) == [0, 1, 2] and order.full_batches == 0


def test_empty_epoch_has_no_batches() -> None:
    s = DatasetShape(np.array([2, 1]), np.array([0, 0]))
    order = plan_epoch(s, [np.zeros(0, dtype=np.int64)], OrderConfig(global_batch_size=4), epoch=0)
    assert order.batches.shape == (0, 4) and order.num_padded == 0
