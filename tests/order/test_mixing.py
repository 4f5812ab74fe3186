"""Tests for stream mixing: per-epoch sample counts under proportion / repeat / choose."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.order.mixing import StreamWeight, samples_per_stream, validate_weights

W = StreamWeight
A_B_SIZES = [100, 200]  # Stream A and Stream B of the MosaicML mixing guide.


def _counts(weights: list[StreamWeight], *, epoch_size: int | None = None, sizes=A_B_SIZES, seed: int = 0):
    return samples_per_stream(sizes, weights, epoch_size=epoch_size, seed=seed).tolist()


# The guide's worked examples, number for number.


def test_proportions_split_the_natural_epoch() -> None:
    assert _counts([W(proportion=0.25), W(proportion=0.75)]) == [75, 225]


def test_proportions_split_an_explicit_epoch_size() -> None:
    assert _counts([W(proportion=0.25), W(proportion=0.75)], epoch_size=400) == [100, 300]


def test_proportions_are_normalised() -> None:
    assert _counts([W(proportion=2), W(proportion=6)]) == [75, 225]


def test_repeat_upsamples() -> None:
    assert _counts([W(repeat=3), W()]) == [300, 200]


def test_repeat_below_one_downsamples() -> None:
    assert _counts([W(repeat=0.25), W()]) == [25, 200]


def test_choose_takes_an_absolute_count() -> None:
    assert _counts([W(choose=250), W()]) == [250, 200]


def test_no_weights_gives_natural_sizes() -> None:
    assert _counts([W(), W()]) == [100, 200]


def test_epoch_size_without_weights_splits_by_stream_size() -> None:
    assert _counts([W(), W()], epoch_size=30) == [10, 20]
    assert _counts([W(), W()], epoch_size=600) == [200, 400]


# Rounding.


def test_repeat_truncates_like_mosaicml() -> None:
    # int(0.29 * 100) == 28 because 0.29 * 100 == 28.999999999999996 in float64.
    assert _counts([W(repeat=0.29), W(repeat=1.005)]) == [28, 200]


@pytest.mark.parametrize("epoch_size", [1, 7, 10, 301, 999, 10**9 + 7])
def test_relative_counts_sum_exactly_to_epoch_size(epoch_size: int) -> None:
    counts = _counts(
        [W(proportion=0.1), W(proportion=0.2), W(proportion=0.7)], epoch_size=epoch_size, sizes=[5, 5, 5]
    )
    assert sum(counts) == epoch_size


def test_leftover_sample_goes_to_the_largest_remainder() -> None:
    # 31 * 1/3 = 10.33 and 31 * 2/3 = 20.67: B's remainder is larger, whatever the seed.
    for seed in range(5):
        assert _counts([W(), W()], epoch_size=31, seed=seed) == [10, 21]


def test_tied_leftovers_are_chosen_by_the_seed() -> None:
    equal = [W(proportion=1), W(proportion=1), W(proportion=1)]
    per_seed = {tuple(_counts(equal, epoch_size=10, sizes=[10, 10, 10], seed=seed)) for seed in range(12)}
    assert all(sorted(counts) == [3, 3, 4] for counts in per_seed)
    assert len(per_seed) > 1  # the seed, not the stream order, picks the winner


def test_relative_counts_are_deterministic_golden() -> None:
    equal = [W(proportion=1), W(proportion=1), W(proportion=1)]
    got = [_counts(equal, epoch_size=10, sizes=[10, 10, 10], seed=seed) for seed in range(3)]
    assert got == [[3, 4, 3], [4, 3, 3], [4, 3, 3]]


def test_zero_proportion_never_receives_a_leftover_sample() -> None:
    for seed in range(10):
        assert (
            _counts(
                [W(proportion=1), W(proportion=1), W(proportion=0)], epoch_size=7, sizes=[9, 9, 9], seed=seed
            )[2]
            == 0
        )


def test_numpy_scalars_are_accepted() -> None:
    assert _counts(
        [W(proportion=np.float32(0.25)), W(proportion=np.float64(0.75))], epoch_size=np.int64(400)
    ) == [100, 300]


def test_result_is_int64() -> None:
    assert samples_per_stream([3], [W()], epoch_size=None, seed=0).dtype == np.int64


# Schemes and errors.


def test_schemes_are_named() -> None:
    assert validate_weights([W(), W()], epoch_size=None) == "natural"
    assert validate_weights([W(), W()], epoch_size=5) == "natural"
    assert validate_weights([W(proportion=1), W(proportion=3)], epoch_size=5) == "relative"
    assert validate_weights([W(repeat=2), W(choose=3), W()], epoch_size=None) == "absolute"


def test_proportion_mixed_with_choose_names_both_streams() -> None:
    with pytest.raises(
        ConfigError, match=r"found proportion on streams \[0\] but repeat/choose/none on streams \[1\]"
    ):
        validate_weights([W(proportion=0.5), W(choose=10)], epoch_size=None)


def test_proportion_mixed_with_unset_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"give every stream a proportion"):
        validate_weights([W(), W(proportion=0.5)], epoch_size=None)


def test_epoch_size_with_absolute_weights_is_rejected_like_mosaicml() -> None:
    with pytest.raises(
        ConfigError, match=r"epoch_size: expected None with repeat/choose weights \(streams \[0\]\), found 10"
    ):
        validate_weights([W(repeat=2), W()], epoch_size=10)


def test_two_weights_on_one_stream_are_rejected() -> None:
    with pytest.raises(
        ConfigError, match=r"expected at most one of proportion, repeat, choose, found proportion, choose"
    ):
        W(proportion=0.5, choose=3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"proportion": -0.1}, r"proportion: expected a finite number >= 0, found -0.1"),
        ({"repeat": float("nan")}, r"repeat: expected a finite number >= 0, found nan"),
        ({"choose": -1}, r"choose: expected an int >= 0, found -1"),
        ({"choose": 2.5}, r"choose: expected an int >= 0, found float 2.5"),
        ({"repeat": True}, r"repeat: expected a number >= 0, found bool True"),
    ],
)
def test_bad_weight_values_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        W(**kwargs)


def test_all_zero_proportions_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"expected at least one stream with proportion > 0, found all 0"):
        validate_weights([W(proportion=0), W(proportion=0)], epoch_size=None)


@pytest.mark.parametrize("epoch_size", [0, -5, 2.5, True])
def test_bad_epoch_size_is_rejected(epoch_size: object) -> None:
    with pytest.raises(ConfigError, match=r"epoch_size: expected a positive int or None"):
        validate_weights([W()], epoch_size=epoch_size)  # type: ignore[arg-type]


def test_no_streams_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"streams: expected at least one stream, found none"):
        validate_weights([], epoch_size=None)


def test_weight_count_must_match_stream_count() -> None:
    with pytest.raises(ConfigError, match=r"weights: expected one per stream \(2\), found 1"):
        samples_per_stream([1, 2], [W()], epoch_size=None, seed=0)


def test_drawing_from_an_empty_stream_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"expected samples to draw from streams \[1\], found them empty"):
        samples_per_stream([10, 0], [W(), W(choose=5)], epoch_size=None, seed=0)


def test_empty_stream_with_no_draw_is_fine() -> None:
    assert _counts([W(), W()], epoch_size=6, sizes=[3, 0]) == [6, 0]
