"""Tests for counter-based randomness keyed by (seed, epoch, purpose, index)."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.order.random import key_words, permute, random_bits, rng_for, unpermute


def _draw(*key: object) -> list[int]:
    return rng_for(*key).integers(0, 2**31, 8).tolist()  # type: ignore[arg-type]


def test_same_key_gives_same_numbers() -> None:
    assert _draw(7, 2, "shard_order", 3) == _draw(7, 2, "shard_order", 3)


def test_seed_plus_one_and_epoch_minus_one_do_not_alias() -> None:
    assert _draw(5, 3, "shard_order") != _draw(6, 2, "shard_order")
    assert key_words(5, 3, "shard_order") != key_words(6, 2, "shard_order")


def test_purposes_give_different_streams() -> None:
    assert _draw(0, 0, "shard_order") != _draw(0, 0, "block_shuffle")


def test_index_narrows_the_stream() -> None:
    assert _draw(0, 0, "stream_sample", 0) != _draw(0, 0, "stream_sample", 1)
    assert _draw(0, 0, "stream_sample", 1, 2) != _draw(0, 0, "stream_sample", 12)
    assert _draw(0, 0, "stream_sample") != _draw(0, 0, "stream_sample", 0)


def test_negative_and_huge_seeds_are_distinct_keys() -> None:
    seeds = [0, 1, -1, 2**32, 2**32 + 1, 2**64, -(2**64), 2**100]
    draws = {tuple(_draw(seed, 0, "shard_order")) for seed in seeds}
    assert len(draws) == len(seeds)


def test_numpy_integers_are_accepted_like_python_ints() -> None:
    assert _draw(np.int64(9), np.uint32(1), "x", np.int16(4)) == _draw(9, 1, "x", 4)


def test_golden_values_do_not_change_between_versions() -> None:
    assert _draw(17, 3, "shard_order", 2)[:4] == [1658114805, 1331599192, 176331685, 362900918]
    assert _draw(-1, 0, "stream_sample")[:3] == [1896401521, 896548081, 1779567090]
    assert _draw(2**64 + 5, 1, "block_shuffle")[:3] == [653778857, 1101457838, 990593146]


def test_random_bits_golden_values_and_counter_independence() -> None:
    bits = random_bits(17, 3, "block_shuffle", np.arange(3), 1)
    assert bits.dtype == np.uint64
    assert bits.tolist() == [11053335305285572776, 14280800407192875740, 983643677939679296]
    # Element i depends only on counter i: computing a subset gives the same values.
    assert random_bits(17, 3, "block_shuffle", np.array([2]), 1).tolist() == [983643677939679296]


def test_random_bits_keeps_the_counter_shape() -> None:
    assert random_bits(0, 0, "x", np.zeros((2, 3), dtype=np.int64)).shape == (2, 3)


def test_bool_seed_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"seed: expected an int, found bool True; pass an int"):
        rng_for(True, 0, "shard_order")


def test_empty_purpose_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"purpose: expected a non-empty str .* found ''"):
        rng_for(0, 0, "")


def test_float_counters_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"counters: expected an integer array, found dtype float64"):
        random_bits(0, 0, "x", np.zeros(2))


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 17, 64, 1000, 40_000])
def test_permute_is_a_bijection_and_unpermute_inverts_it(size: int) -> None:
    ids = permute(np.arange(size), size, 11, 2, "stream_sample", 0)
    assert np.array_equal(np.sort(ids), np.arange(size))
    assert np.array_equal(unpermute(ids, size, 11, 2, "stream_sample", 0), np.arange(size))


def test_permute_maps_each_position_independently() -> None:
    full = permute(np.arange(1000), 1000, 4, 0, "x")
    picked = np.array([999, 3, 500, 3])
    assert np.array_equal(permute(picked, 1000, 4, 0, "x"), full[picked])


def test_permute_golden_values_do_not_change_between_versions() -> None:
    ids = permute(np.arange(10), 10, 3, 1, "stream_sample", 2)
    assert ids.tolist() == [3, 0, 2, 9, 5, 7, 4, 8, 1, 6]
    big = permute(np.array([0, 1, 2, 999_999_999]), 10**9, 3, 1, "stream_sample", 2)
    assert big.tolist() == [616364800, 244403386, 301647263, 928815490]
    # Domains above 2**32 run the network in 64-bit words.
    huge = permute(np.array([0, 1, 2]), 2**40, 3, 1, "stream_sample", 2)
    assert huge.tolist() == [616457828376, 269918004351, 578893473954]


def test_permute_differs_by_key_and_looks_shuffled() -> None:
    first = permute(np.arange(1000), 1000, 0, 0, "x")
    assert not np.array_equal(first, permute(np.arange(1000), 1000, 1, 0, "x"))
    # A shuffled range has about size / e fixed points or fewer; an identity-like map would have many.
    assert np.count_nonzero(first == np.arange(1000)) < 10


def test_permute_rejects_positions_outside_the_range() -> None:
    with pytest.raises(ConfigError, match=r"positions: expected values in \[0, 5\), found \[0, 5\]"):
        permute(np.arange(6), 5, 0, 0, "x")


def test_permute_rejects_an_empty_range() -> None:
    with pytest.raises(ConfigError, match=r"size: expected 1 <= size <= 2\*\*62, found 0"):
        permute(np.arange(0), 0, 0, 0, "x")


@pytest.mark.parametrize("size", [2**32 - 5, 2**32 + 7, 2**40 + 1])
def test_unpermute_inverts_permute_around_the_32_bit_boundary(size: int) -> None:
    positions = np.array([0, 1, size // 2, size - 1])
    ids = permute(positions, size, 1, 2, "x")
    assert ids.min() >= 0 and ids.max() < size
    assert np.array_equal(unpermute(ids, size, 1, 2, "x"), positions)
