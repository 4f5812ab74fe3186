"""Batching methods: the composition each one promises for every global (or device) batch."""

from __future__ import annotations

import numpy as np
import pytest
from whole_job import assert_job_resumes_identically, assert_rows_equal, job_batches, order_rows

from stream_plugin.errors import ConfigError, StateError
from stream_plugin.order.batching import epoch_batches, stratified_portions
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


@pytest.mark.parametrize("method", ["random", "stratified", "per_stream", "device_per_stream"])
def test_every_method_uses_each_sample_at_most_once(method: str) -> None:
    order = plan(method, device_batch_size=10)
    flat = order.real_flat()
    assert len(np.unique(flat)) == len(flat) and flat.min() >= 0 and flat.max() < 999


def test_random_uses_every_sample_once() -> None:
    np.testing.assert_array_equal(np.sort(plan("random").real_flat()), np.arange(999))


@pytest.mark.parametrize("method", ["random", "stratified", "per_stream", "device_per_stream"])
def test_epoch_batches_counts_without_planning(method: str) -> None:
    order = plan(method, device_batch_size=10)
    full, rest = epoch_batches(STREAM_SIZES, method=method, global_batch_size=40, device_batch_size=10)
    assert (full, rest) == (order.full_batches, len(order.tail))


def test_random_mixes_streams_in_proportion_on_average() -> None:
    order = plan("random")
    counts = np.stack([np.bincount(stream_of(row), minlength=3) for row in order.batches[:-1]])
    np.testing.assert_allclose(counts.mean(axis=0), 40 * STREAM_SIZES / 999, atol=2.5)
    assert len({tuple(row) for row in counts}) > 1  # proportions vary between batches


def test_stratified_batches_hold_mosaicml_fixed_portions() -> None:
    order = plan("stratified")
    # MosaicML: floor(40 * share) = [12, 20, 7], the missing slot to the largest remainder (stream 2).
    assert stratified_portions(STREAM_SIZES, 40).tolist() == [12, 20, 8]
    counts = np.stack([np.bincount(stream_of(row), minlength=3) for row in order.batches])
    assert np.all(counts == [12, 20, 8])
    assert order.num_batches == min(300 // 12, 500 // 20, 199 // 8) == 24 and order.num_padded == 0


def test_stratified_portions_sum_to_the_batch_for_many_mixes() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        sizes = rng.integers(1, 400, rng.integers(1, 7))
        G = int(rng.integers(1, 50))
        portions = stratified_portions(sizes, G)
        share = G * sizes / sizes.sum()
        assert portions.sum() == G
        assert np.all(portions >= np.floor(share)) and np.all(portions <= np.floor(share) + 1)


def test_stratified_refuses_a_stream_too_small_for_its_share() -> None:
    with pytest.raises(
        ConfigError, match=r"stream 1: expected at least one sample in each global batch of 10"
    ):
        epoch_batches(np.array([995, 5]), method="stratified", global_batch_size=10, device_batch_size=None)
    with pytest.raises(ValueError, match=r"increase the global batch size, or the proportion"):
        plan_epoch(
            DatasetShape(np.array([995, 5]), np.array([0, 1])),
            [np.arange(995), np.arange(5)],
            OrderConfig(batching_method="stratified", global_batch_size=10),
            epoch=0,
        )


def test_stratified_spreads_streams_over_slots_when_shuffling() -> None:
    order = plan("stratified")
    first_slot_streams = set(stream_of(order.batches[:, 0]).tolist())
    assert first_slot_streams == {0, 1, 2}  # every rank sees every stream, not one stream per slot range


def test_per_stream_batches_each_come_from_one_stream_and_are_whole() -> None:
    order = plan("per_stream")
    for row in order.batches:
        assert len(set(stream_of(row).tolist())) == 1
    batches_per_stream = np.bincount(stream_of(order.batches[:, 0]), minlength=3)
    assert batches_per_stream.tolist() == (STREAM_SIZES // 40).tolist()  # MosaicML's count
    assert order.num_padded == 0


def test_per_stream_batch_sequence_is_shuffled_and_deterministic() -> None:
    streams = stream_of(plan("per_stream").batches[:, 0])
    assert streams.tolist() != sorted(streams.tolist())
    np.testing.assert_array_equal(streams, stream_of(plan("per_stream").batches[:, 0]))


@pytest.mark.parametrize("method", ["random", "stratified", "per_stream", "device_per_stream"])
def test_unshuffled_order_is_the_same_every_epoch(method: str) -> None:
    config = OrderConfig(
        shuffle=False,
        num_canonical_nodes=4,
        batching_method=method,  # type: ignore[arg-type]
        global_batch_size=40,
        device_batch_size=10,
    )
    chosen = [np.arange(n) for n in STREAM_SIZES]
    first = plan_epoch(shape(), chosen, config, epoch=0)
    for epoch in (1, 5):
        np.testing.assert_array_equal(plan_epoch(shape(), chosen, config, epoch=epoch).batches, first.batches)


def test_device_per_stream_device_batches_each_come_from_one_stream() -> None:
    order = plan("device_per_stream", G=40, device_batch_size=10)
    assert order.num_batches == (STREAM_SIZES // 10).sum() // 4 and order.num_padded == 0
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
    assert_rows_equal(job_batches(order, 0, 40, then), order_rows(order))
    assert_job_resumes_identically(order, [(first, 40), (then, 40)])


def test_unknown_batching_method_lists_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"batching_method: expected one of \['random', .*found 'mixed'"):
        OrderConfig(batching_method="mixed")  # type: ignore[arg-type]


def test_upsampled_repeats_appear_as_often_as_chosen() -> None:
    chosen = [np.repeat(np.arange(300), 2), np.arange(0, 500, 5), np.repeat(np.arange(50), 2)]  # 600/100/100
    config = OrderConfig(
        shuffle=True, num_canonical_nodes=4, global_batch_size=16, batching_method="stratified"
    )
    order = plan_epoch(shape(), chosen, config, epoch=0)
    expected = np.concatenate([chosen[0], 300 + chosen[1], 800 + chosen[2]])
    np.testing.assert_array_equal(np.sort(order.real_flat()), np.sort(expected))


def test_per_stream_stream_smaller_than_a_batch_gives_no_batch() -> None:
    tiny = DatasetShape(np.array([100, 3]), np.array([0, 1]))
    config = OrderConfig(
        shuffle=True, num_canonical_nodes=4, global_batch_size=16, batching_method="per_stream"
    )
    order = plan_epoch(tiny, [np.arange(100), np.arange(3)], config, epoch=0)
    assert order.num_batches == 6 and np.all(order.batches < 100)
