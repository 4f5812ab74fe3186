"""Shuffle algorithms: golden values, permutation property, locality, registry and aliases."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.order.layout import DatasetShape
from stream_plugin.order.plan import OrderConfig, plan_epoch
from stream_plugin.order.shuffle import (
    SpanKey,
    canonical_shuffle_name,
    default_block_size,
    get_shuffle,
    permute_segments,
    shuffle_names,
    shuffle_segments,
    stable_argsort,
)

ALGORITHMS = ("none", "permute", "block", "intra_shard")
SHARD_BOUNDS = np.array([0, 5, 8, 12])  # a 12-sample span made of three shard runs
KEY = SpanKey(seed=7, epoch=1, span=(0, 0), block_size=4)

# Pinned outputs. If one changes, every user's sample order changed: bump the version in the
# README and say so in the changelog before updating these. EPOCH_GOLDEN changed when shards
# started to stay on their canonical node across epochs (issue 28; resume state version 2).
SPAN_GOLDEN = {
    "none": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    "permute": [4, 7, 2, 0, 3, 10, 8, 6, 11, 1, 9, 5],
    "block": [0, 2, 1, 3, 6, 4, 5, 7, 9, 10, 8, 11],
    "intra_shard": [0, 4, 3, 2, 1, 5, 6, 7, 9, 8, 10, 11],
}
EPOCH_GOLDEN = {
    "none": [0, 1, 12, 13, 2, 3, 14, 15, 4, 5, 16, 17, 6, 7, 18, 19, 8, 9, 20, 21, 10, 11, 22, 23],
    "permute": [13, 16, 22, 2, 10, 8, 1, 19, 12, 6, 20, 3, 17, 15, 11, 21, 7, 9, 4, 18, 5, 14, 23, 0],
    "block": [8, 10, 20, 21, 9, 14, 22, 18, 12, 13, 11, 23, 16, 17, 0, 1, 15, 6, 19, 3, 7, 5, 4, 2],
    "intra_shard": [10, 8, 21, 23, 9, 15, 22, 20, 12, 16, 11, 19, 13, 17, 18, 2, 14, 7, 0, 1, 6, 5, 3, 4],
}


def shuffled_span(
    algo: str, ids: np.ndarray, bounds: np.ndarray = SHARD_BOUNDS, key: SpanKey = KEY
) -> np.ndarray:
    out = ids.copy()
    get_shuffle(algo)(out, bounds, key)
    return out


def small_epoch(algo: str, epoch: int = 1) -> list[int]:
    shape = DatasetShape(np.array([5, 3, 4, 6, 2, 4]), np.zeros(6, dtype=np.int64))
    config = OrderConfig(
        shuffle=True,
        shuffle_algo=algo,
        shuffle_seed=7,
        shuffle_block_size=3,
        num_canonical_nodes=2,
        global_batch_size=4,
    )
    return plan_epoch(shape, [np.arange(24)], config, epoch).batches.ravel().tolist()


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_span_shuffle_golden_values(algo: str) -> None:
    assert shuffled_span(algo, np.arange(12)).tolist() == SPAN_GOLDEN[algo]


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_epoch_order_golden_values(algo: str) -> None:
    assert small_epoch(algo) == EPOCH_GOLDEN[algo]


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_every_shuffle_is_a_permutation_of_its_span(algo: str) -> None:
    ids = np.arange(1000, 1500)
    bounds = np.array([0, 7, 100, 101, 350, 500])
    out = shuffled_span(algo, ids, bounds, SpanKey(3, 0, (1, 2), 64))
    np.testing.assert_array_equal(np.sort(out), ids)


@pytest.mark.parametrize("algo", ["permute", "block", "intra_shard"])
def test_every_epoch_reshuffles(algo: str) -> None:
    assert small_epoch(algo, epoch=1) != small_epoch(algo, epoch=2)


def test_spans_are_shuffled_independently() -> None:
    other = SpanKey(seed=7, epoch=1, span=(0, 1), block_size=4)
    assert shuffled_span("permute", np.arange(12), key=other).tolist() != SPAN_GOLDEN["permute"]


def test_block_shuffle_keeps_samples_in_their_block() -> None:
    out = shuffled_span("block", np.arange(1000), np.array([0, 1000]), SpanKey(1, 1, (0, 0), 64))
    np.testing.assert_array_equal(out // 64, np.arange(1000) // 64)
    assert not np.array_equal(out, np.arange(1000))


def test_a_block_touches_at_most_block_over_shard_plus_one_shards() -> None:
    shard_size, block = 30, 100
    shard_of_sample = np.arange(3000) // shard_size
    out = shuffled_span(
        "block", shard_of_sample.copy(), np.arange(0, 3001, shard_size), SpanKey(5, 0, (0, 0), block)
    )
    for start in range(0, 3000, block):
        touched = len(np.unique(out[start : start + block]))
        assert touched <= -(-block // shard_size) + 1


def test_intra_shard_shuffle_keeps_samples_in_their_shard() -> None:
    bounds = np.array([0, 10, 25, 26, 60])
    shard_of_sample = np.repeat(np.arange(4), np.diff(bounds))
    out = shuffled_span("intra_shard", np.arange(60), bounds, SpanKey(2, 3, (0, 0), 8))
    np.testing.assert_array_equal(shard_of_sample[out], shard_of_sample)


def test_many_small_segments_use_the_vectorised_path_and_stay_within_segments() -> None:
    bounds = np.arange(0, 20_001, 2)  # 10,000 segments of 2: more than the loop threshold
    ids = np.arange(20_000)
    shuffle_segments(ids, bounds, np.random.default_rng(0))
    np.testing.assert_array_equal(ids // 2, np.arange(20_000) // 2)
    assert not np.array_equal(ids, np.arange(20_000))


@pytest.mark.parametrize(
    "alias, name",
    [
        ("naive", "permute"),
        ("py1b", "block"),
        ("py1br", "block"),
        ("py1e", "block"),
        ("py1s", "intra_shard"),
        ("py2s", "intra_shard"),
    ],
)
def test_mosaicml_names_are_aliases(alias: str, name: str) -> None:
    assert canonical_shuffle_name(alias) == name
    assert get_shuffle(alias) is get_shuffle(name)


def test_registry_lists_the_descriptive_names() -> None:
    assert set(ALGORITHMS) <= set(shuffle_names())


def test_unknown_algorithm_names_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"shuffle_algo: expected one of .*'block'.* found 'py3x'"):
        OrderConfig(shuffle=True, shuffle_algo="py3x")


def test_default_block_size_follows_mosaicml() -> None:
    assert default_block_size(1) == 4_000_000
    assert default_block_size(8) == 500_000
    assert default_block_size(64) == 1 << 18


@pytest.mark.parametrize("ties", [False, True])
def test_stable_argsort_equals_numpys_stable_sort_with_and_without_ties(ties: bool) -> None:
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 1000, 300_000):
        segments = np.repeat(np.arange(max(n // 100, 1), dtype=np.float64), 100)[:n]
        keys = segments + rng.random(n)
        if ties and n > 1:
            keys[rng.integers(0, n, n // 3 + 1)] = keys[0]  # many equal keys: order decided by position
        expected = np.argsort(keys, kind="stable")
        assert np.array_equal(stable_argsort(keys), expected), n
        if ties and n > 2:
            assert not np.array_equal(np.argsort(keys, kind="quicksort"), expected) or n < 50


@pytest.mark.parametrize("segments", [10, 5_000])
def test_permute_segments_is_shuffle_segments_either_way_it_is_asked(segments: int) -> None:
    # shuffle_segments picks the way by the number of segments; permute_segments takes it as told (a
    # span reader decides once for the whole span), and the sort keys start at first_segment.
    bounds = np.concatenate([[0], np.cumsum(np.random.default_rng(3).integers(1, 9, segments))])
    expected = np.arange(bounds[-1])
    shuffle_segments(expected, bounds, np.random.default_rng(11))
    told = np.arange(bounds[-1])
    permute_segments(told, bounds, np.random.default_rng(11), vectorised=segments > 4096)
    assert np.array_equal(told, expected)
    shifted = np.arange(bounds[-1])
    permute_segments(shifted, bounds, np.random.default_rng(11), vectorised=True, first_segment=1_000)
    starts = bounds[:-1]
    assert sorted(shifted[starts[0] : bounds[1]].tolist()) == list(range(bounds[1]))  # segments stay apart
    assert sorted(shifted.tolist()) == list(range(bounds[-1]))
