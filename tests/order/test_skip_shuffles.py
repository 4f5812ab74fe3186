"""``shuffle.skip_shuffles`` leaves a generator exactly where real ``Generator.shuffle`` calls leave it.

A resume replays the draws of the blocks it skips without their samples; if the replay were off by
one 32-bit half-draw, every later block of the span would be shuffled differently.
"""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.order.layout import AllSamples, DatasetShape, group_runs
from stream_plugin.order.random import rng_for
from stream_plugin.order.shuffle import SpanKey, get_shuffle, skip_shuffles
from stream_plugin.order.span_reader import SpanReader

# Lengths on both sides of powers of two: the rejection sampler's mask changes there.
EDGE_LENGTHS = sorted({max(0, (1 << k) + d) for k in range(18) for d in (-1, 0, 1)})


def _shuffle_for_real(rng: np.random.Generator, lengths: list[int], dtype: type = np.int32) -> None:
    for length in lengths:
        rng.shuffle(np.arange(length, dtype=dtype))


def _state(rng: np.random.Generator) -> dict[str, object]:
    return rng.bit_generator.state  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", range(12))
def test_skip_shuffles_leaves_the_generator_where_real_shuffles_leave_it(seed: int) -> None:
    lengths = EDGE_LENGTHS.copy()
    rng_for(seed, 0, "test", 1).shuffle(lengths)
    real, skipped = rng_for(seed, 0, "test"), rng_for(seed, 0, "test")
    # Checked after every shuffle: both read one stream, so a replay that is off by some draws can
    # fall back into step later (the two walks meet) and look right at the end.
    for length in lengths:
        _shuffle_for_real(real, [length])
        skip_shuffles(skipped, [length])
        assert _state(skipped) == _state(real), length
    _shuffle_for_real(real, lengths[:3])
    skip_shuffles(skipped, lengths[:3])  # several in one call
    assert _state(skipped) == _state(real)
    assert skipped.integers(0, 2**63) == real.integers(0, 2**63)
    block = np.arange(1000)
    np.testing.assert_array_equal(skipped.permutation(block), real.permutation(block))


def test_skip_shuffles_keeps_a_pending_half_draw_in_step() -> None:
    """numpy hands out the 64-bit outputs in 32-bit halves; a shuffle may end with one half unused."""
    pending = 0
    for seed in range(40):
        real, skipped = rng_for(seed, 0, "halves"), rng_for(seed, 0, "halves")
        lengths = rng_for(seed, 0, "lengths").integers(0, 3000, size=7).tolist()
        for length in lengths:
            _shuffle_for_real(real, [length], np.int64)
            skip_shuffles(skipped, [length])
            assert _state(skipped) == _state(real), (seed, length)
            pending += int(_state(real)["has_uint32"])  # type: ignore[call-overload]
    assert pending > 20  # both parities were exercised


def test_skip_shuffles_of_nothing_draws_nothing() -> None:
    rng, untouched = rng_for(3, 0, "test"), rng_for(3, 0, "test")
    skip_shuffles(rng, [0, 1, 1, 0])
    assert _state(rng) == _state(untouched)


@pytest.mark.parametrize("block_size", [(1 << 16) - 1, 1 << 16, (1 << 16) + 1, 100_003])
def test_a_span_reader_resumed_past_large_blocks_reads_what_the_whole_shuffle_gives(block_size: int) -> None:
    """A resume deep into a span of big blocks, as at 90% of a billion-sample epoch, in miniature.

    Only a sanity check of the wiring: a replay that is a few draws off usually falls back into step
    within a big block, so the generator-state tests above are the sharp ones.
    """
    num_samples = 5 * block_size + 1234
    shape = DatasetShape(np.full(10, num_samples // 10 + 1, dtype=np.int64), np.zeros(10, dtype=np.int64))
    runs = group_runs(shape, [AllSamples(int(shape.num_samples))], [0])
    key = SpanKey(seed=11, epoch=2, span=(0, 1), block_size=block_size)
    whole = np.empty(num_samples, dtype=np.int64)
    bounds = runs.copy_range(0, num_samples, whole)
    get_shuffle("block")(whole, bounds, key)
    for skip in (4 * block_size, 4 * block_size + 17, num_samples - 5):
        reader = SpanReader(runs, 0, num_samples, key, "block", np.dtype(np.int64))
        reader.skip(skip)
        np.testing.assert_array_equal(reader.read(num_samples - skip), whole[skip:])
