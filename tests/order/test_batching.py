"""Batching methods: the composition each one promises for every global (or device) batch."""

from __future__ import annotations

import numpy as np
import pytest
from resume_helpers import assert_resumes_identically, job_batches

from stream_plugin.errors import ConfigError, StateError
from stream_plugin.order.batching import stratified_counts
from stream_plugin.order.layout import DatasetShape
from stream_plugin.order.partition import rank_worker_batches
from stream_plugin.order.plan import EpochOrder, OrderConfig, plan_epoch
from stream_plugin.order.topology import Topology

# Three streams of 300, 500 and 199 samples in shards of varying size.
SIZES = np.array([50, 100, 150, 120, 130, 250, 100, 99])
STREAMS = np.array([0, 0, 0, 1, 1, 1, 2, 2])
STREAM_SIZES = np.array([300, 500, 199])
STREAM_STARTS = np.array([0, 300, 800, 999])


def shape() -> DatasetShape:
    return DatasetShape(SIZES, STREAMS)


def plan(method: str, G: int = 40, shuffle: bool = True, device_batch_size: int | None = None) -> EpochOrder:
    config = OrderConfig(
        shuffle=shuffle,
        shuffle_algo="block",
        shuffle_block_size=32,
        num_canonical_nodes=4,
        batching_method=method,  # type: ignore[arg-type]
        global_batch_size=G,
        device_batch_size=device_batch_size,
    )
    return plan_epoch(shape(), [np.arange(n) for n in STREAM_SIZES], config, epoch=1)


def stream_of(ids: np.ndarray) -> np.ndarray:
    return np.searchsorted(STREAM_STARTS, ids, side="right") - 1


def real_mask(order: EpochOrder) -> np.ndarray:
    mask = np.ones(order.batches.shape, dtype=bool)
    mask.reshape(-1)[order.pad_positions] = False
    return mask


@pytest.mark.parametrize("method", ["random", "stratified", "per_stream", "device_per_stream"])
def test_every_method_covers_each_chosen_sample_once(method: str) -> None:
    order = plan(method, device_batch_size=10)
    np.testing.assert_array_equal(np.sort(order.real_flat()), np.arange(999))


def test_random_mixes_streams_in_proportion_on_average() -> None:
    order = plan("random")
    counts = np.stack([np.bincount(stream_of(row), minlength=3) for row in order.batches[:-1]])
    np.testing.assert_allclose(counts.mean(axis=0), 40 * STREAM_SIZES / 999, atol=2.5)
    assert len({tuple(row) for row in counts}) > 1  # proportions vary between batches


def test_stratified_batches_hold_floor_or_ceil_of_each_share() -> None:
    order = plan("stratified")
    share = 40 * STREAM_SIZES / 999
    counts = np.stack([np.bincount(stream_of(row), minlength=3) for row in order.batches[:-1]])
    assert np.all(counts >= np.floor(share)) and np.all(counts <= np.ceil(share))
    cumulative = np.cumsum(counts, axis=0)
    ideal = np.arange(1, len(counts) + 1)[:, None] * share[None, :]
    assert np.abs(cumulative - ideal).max() < 1


def test_stratified_counts_track_shares_for_many_mixes() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        sizes = rng.integers(0, 400, rng.integers(1, 7))
        G = int(rng.integers(1, 50))
        if sizes.sum() == 0:
            continue
        counts = stratified_counts(sizes, G)  # (T, S)
        full = int(sizes.sum() // G)
        share = G * sizes / sizes.sum()
        np.testing.assert_array_equal(counts.sum(axis=0), sizes)
        assert np.all(counts[:full].sum(axis=1) == G)
        assert np.all(counts[:full] >= np.floor(share)) and np.all(counts[:full] <= np.ceil(share))


def test_stratified_spreads_streams_over_slots_when_shuffling() -> None:
    order = plan("stratified")
    first_slot_streams = set(stream_of(order.batches[:, 0]).tolist())
    assert first_slot_streams == {0, 1, 2}  # every rank sees every stream, not one stream per slot range


def test_per_stream_batches_each_come_from_one_stream_padding_included() -> None:
    order = plan("per_stream")
    for row in order.batches:
        assert len(set(stream_of(row).tolist())) == 1
    batches_per_stream = np.bincount(stream_of(order.batches[:, 0]), minlength=3)
    assert batches_per_stream.tolist() == (-(-STREAM_SIZES // 40)).tolist()
    assert order.num_padded == int((batches_per_stream * 40 - STREAM_SIZES).sum())  # < G per stream


def test_per_stream_batch_sequence_is_shuffled_and_deterministic() -> None:
    streams = stream_of(plan("per_stream").batches[:, 0])
    assert streams.tolist() != sorted(streams.tolist())
    np.testing.assert_array_equal(streams, stream_of(plan("per_stream").batches[:, 0]))


def test_device_per_stream_device_batches_each_come_from_one_stream() -> None:
    order = plan("device_per_stream", G=40, device_batch_size=10)
    device_batches = order.batches.reshape(-1, 10)  # (T * 4, B)
    for batch in device_batches:
        assert len(set(stream_of(batch).tolist())) == 1
    global_mix = {len(set(stream_of(row).tolist())) for row in order.batches}
    assert max(global_mix) > 1  # a global batch may mix streams; a device batch may not


def test_device_per_stream_needs_the_device_batch_size() -> None:
    with pytest.raises(ConfigError, match=r"device_batch_size: expected an int >= 1, found None"):
        OrderConfig(batching_method="device_per_stream", global_batch_size=40)
    with pytest.raises(ConfigError, match=r"global_batch_size: expected a multiple of device_batch_size=16"):
        OrderConfig(batching_method="device_per_stream", global_batch_size=40, device_batch_size=16)


def test_device_per_stream_cannot_resume_on_another_data_parallel_size() -> None:
    order = plan("device_per_stream", G=40, device_batch_size=10)
    rank_worker_batches(order, consumed=40, global_batch_size=40, topology=Topology(2, 2, 0))  # B = 10: fine
    with pytest.raises(StateError, match=r"device batch size: expected 10 .* found 20 = 40 / 2"):
        rank_worker_batches(order, consumed=40, global_batch_size=40, topology=Topology(1, 2, 0))


def test_per_stream_refuses_a_changed_global_batch_size() -> None:
    order = plan("per_stream")
    with pytest.raises(StateError, match=r"expected 40 .* found global_batch_size=20.*finish this epoch"):
        rank_worker_batches(order, consumed=40, global_batch_size=20, topology=Topology())


@pytest.mark.parametrize("method", ["random", "stratified", "per_stream", "device_per_stream"])
def test_every_method_resumes_exactly_on_another_layout(method: str) -> None:
    order = plan(method, device_batch_size=10)
    first, then = Topology(2, 2, 2), Topology(4, 1, 4)  # both have 4 data-parallel ranks: B = 10
    np.testing.assert_array_equal(job_batches(order, 0, 40, then), order.batches)
    assert_resumes_identically(order, [(first, 40), (then, 40)])


def test_unknown_batching_method_lists_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"batching_method: expected one of \['random', .*found 'mixed'"):
        OrderConfig(batching_method="mixed")  # type: ignore[arg-type]


def test_upsampled_repeats_appear_as_often_as_chosen() -> None:
    chosen = [np.repeat(np.arange(300), 2), np.arange(0, 500, 5), np.array([3, 3, 3])]
    config = OrderConfig(
        shuffle=True, num_canonical_nodes=4, global_batch_size=16, batching_method="stratified"
    )
    order = plan_epoch(shape(), chosen, config, epoch=0)
    expected = np.concatenate([chosen[0], 300 + chosen[1], 800 + chosen[2]])
    np.testing.assert_array_equal(np.sort(order.real_flat()), np.sort(expected))


def test_per_stream_padding_of_a_tiny_stream_comes_from_that_stream() -> None:
    tiny = DatasetShape(np.array([100, 3]), np.array([0, 1]))
    config = OrderConfig(
        shuffle=True, num_canonical_nodes=4, global_batch_size=16, batching_method="per_stream"
    )
    order = plan_epoch(tiny, [np.arange(100), np.arange(3)], config, epoch=0)
    for row in order.batches:
        assert len(set((row >= 100).tolist())) == 1  # one stream per batch, padding included
    tiny_row = order.batches[order.batches[:, 0] >= 100][0]
    assert sorted(set(tiny_row.tolist())) == [100, 101, 102]
