"""Layout: dataset shape, shard runs, shuffled shard order, canonical-node spans and padding placement."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.order.layout import (
    DatasetShape,
    group_runs,
    node_shard_order,
    shard_placement,
    slot_ranges,
)
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
    cuts = np.array([0, 6, 13, 21])  # three nodes, both cuts inside a shard
    runs = node_shard_order(group_runs(shape(), chosen, [0, 1]), (0, 7), cuts, seed=3, epoch=2, group=0)
    whole = np.empty(runs.num_samples, dtype=np.int64)
    runs.copy_range(0, runs.num_samples, whole)
    for begin in range(runs.num_samples + 1):
        for end in range(begin, runs.num_samples + 1):
            part = np.empty(end - begin, dtype=np.int32)
            runs.copy_range(begin, end, part)
            assert part.tolist() == whole[begin:end].tolist()


def fifty_shards_of_three() -> DatasetShape:
    return DatasetShape(np.full(50, 3), np.zeros(50, dtype=np.int64))


def test_shard_placement_is_drawn_once_per_run_from_the_seed() -> None:
    first = shard_placement(50, seed=1, group=0)
    assert sorted(first.tolist()) == list(range(50))
    np.testing.assert_array_equal(first, shard_placement(50, seed=1, group=0))
    assert first.tolist() != shard_placement(50, seed=2, group=0).tolist()
    assert first.tolist() != shard_placement(50, seed=1, group=1).tolist()


def test_each_epoch_permutes_the_shards_inside_each_node_only() -> None:
    runs = group_runs(fifty_shards_of_three(), [np.arange(150)], [0])
    cuts = np.array([0, 60, 90, 150])  # nodes of 20, 10 and 20 whole shards
    placed = shard_placement(50, seed=1, group=0)
    first = node_shard_order(runs, (0, 50), cuts, seed=1, epoch=0, group=0)
    second = node_shard_order(runs, (0, 50), cuts, seed=1, epoch=1, group=0)
    for node_shards in (slice(0, 20), slice(20, 30), slice(30, 50)):
        assert sorted(first.shard[node_shards].tolist()) == sorted(placed[node_shards].tolist())
        assert sorted(second.shard[node_shards].tolist()) == sorted(placed[node_shards].tolist())
    assert first.shard.tolist() != second.shard.tolist()
    repeat = node_shard_order(runs, (0, 50), cuts, seed=1, epoch=0, group=0)
    np.testing.assert_array_equal(first.shard, repeat.shard)


def test_a_shard_cut_by_a_node_boundary_is_two_pieces_each_kept_in_its_node() -> None:
    runs = group_runs(fifty_shards_of_three(), [np.arange(150)], [0])
    cuts = np.array([0, 61, 150])  # the cut falls one sample into the node's 21st shard
    cut_shard = int(shard_placement(50, seed=4, group=0)[20])
    for epoch in range(4):
        order = node_shard_order(runs, (0, 50), cuts, seed=4, epoch=epoch, group=0)
        assert order.num_samples == 150 and len(order.shard) == 51
        ids = np.empty(150, dtype=np.int64)
        order.copy_range(0, 150, ids)
        assert sorted(ids.tolist()) == list(range(150))
        assert ids[:61].tolist().count(3 * cut_shard) == 1  # the shard's first sample: first node
        assert {3 * cut_shard + 1, 3 * cut_shard + 2} <= set(ids[61:].tolist())


def test_a_shard_with_no_chosen_sample_leaves_the_others_in_place() -> None:
    shape = fifty_shards_of_three()
    placed = shard_placement(50, seed=3, group=0)
    one_shard_per_node = np.arange(0, 151, 3)  # 50 nodes of one whole shard: nothing left to permute
    every = node_shard_order(group_runs(shape, [np.arange(150)], [0]), (0, 50), one_shard_per_node, 3, 5, 0)
    assert every.shard.tolist() == placed.tolist()
    without_7 = np.setdiff1d(np.arange(150), [21, 22, 23])  # shard 7 has no chosen sample this epoch
    fewer = node_shard_order(group_runs(shape, [without_7], [0]), (0, 50), one_shard_per_node[:-1], 3, 5, 0)
    assert fewer.shard.tolist() == [shard for shard in placed.tolist() if shard != 7]
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


@pytest.mark.parametrize(
    "span_begins",
    [[0, 37, 75, 112, 163], [0, 0, 50, 50, 163], [0, 40, 41, 42, 163], [0, 163, 163]],
    ids=["a shard over four nodes", "nodes with no slot", "nodes of one sample", "a node with nothing"],
)
def test_a_shard_longer_than_a_span_is_cut_into_a_piece_per_node(span_begins: list[int]) -> None:
    """Several cuts inside one run: each node reads the same samples of it every epoch."""
    shape = DatasetShape(np.array([150, 10, 3]), np.zeros(3, dtype=np.int64))
    runs = group_runs(shape, [np.arange(163)], [0])
    begins = np.array(span_begins)
    per_epoch = []
    for epoch in range(3):
        order = node_shard_order(runs, (0, 3), begins, seed=4, epoch=epoch, group=0)
        ids = np.empty(order.num_samples, dtype=np.int64)
        order.copy_range(0, order.num_samples, ids)
        assert sorted(ids.tolist()) == list(range(163))
        spans = zip(span_begins[:-1], span_begins[1:], strict=True)
        per_epoch.append([sorted(ids[a:b].tolist()) for a, b in spans])
    assert per_epoch[0] == per_epoch[1] == per_epoch[2]


@pytest.mark.parametrize("seed", range(6))
def test_each_node_reads_exactly_its_part_of_the_fixed_shard_order(seed: int) -> None:
    """Against a plain reference: the shards laid out whole in ``shard_placement`` order, cut at the spans."""
    rng = np.random.default_rng(seed)
    num_shards = int(rng.integers(1, 40))
    shape = DatasetShape(rng.integers(1, 30, num_shards), np.zeros(num_shards, dtype=np.int64))
    total = shape.num_samples
    span_begins = np.concatenate([[0], np.sort(rng.integers(0, total + 1, int(rng.integers(0, 9)))), [total]])
    offsets = shape.shard_offsets
    fixed = np.concatenate(
        [np.arange(offsets[s], offsets[s + 1]) for s in shard_placement(num_shards, seed=seed, group=0)]
    )  # (N,): every sample, shard by shard in the fixed order
    order = node_shard_order(group_runs(shape, [np.arange(total)], [0]), (0, num_shards), span_begins, seed, 7, 0)
    ids = np.empty(total, dtype=np.int64)
    bounds = order.copy_range(0, total, ids)
    assert len(bounds) - 1 == len(order.shard)
    assert set(span_begins.tolist()) <= set(order.cum.tolist())  # no piece straddles a node's boundary
    for a, b in zip(span_begins[:-1].tolist(), span_begins[1:].tolist(), strict=True):
        assert sorted(ids[a:b].tolist()) == sorted(fixed[a:b].tolist())
