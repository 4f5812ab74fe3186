"""Tests for per-epoch sample selection (balanced / fixed, sampling granularity)."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.order import sampling
from stream_plugin.order.sampling import epoch_samples, epoch_stream_samples

SHARDS = np.array([4, 0, 6, 3])  # 13 samples; an empty shard and ragged sizes on purpose


def _draw(
    count: int,
    *,
    epoch: int = 0,
    method: str = "balanced",
    granularity: int = 1,
    shards=SHARDS,
    seed: int = 7,
):
    return epoch_stream_samples(
        int(shards.sum()),
        count,
        samples_per_shard=shards,
        method=method,  # type: ignore[arg-type]
        granularity=granularity,
        seed=seed,
        epoch=epoch,
        stream_index=1,
    )


def _random_layouts(trials: int):
    """Yield (shards, granularity, whole, rest) for small random streams."""
    rng = np.random.default_rng(1)
    for _ in range(trials):
        shards = rng.integers(0, 9, rng.integers(1, 6))
        n = int(shards.sum())
        if n:
            yield shards, int(rng.integers(1, 5)), int(rng.integers(0, 3)), int(rng.integers(1, n + 1))


@pytest.mark.parametrize("method", ["balanced", "fixed"])
@pytest.mark.parametrize("granularity", [1, 2, 5])
@pytest.mark.parametrize("count", [0, 1, 5, 13, 17, 40])
def test_count_is_exact_sorted_and_in_range(method: str, granularity: int, count: int) -> None:
    ids = _draw(count, epoch=3, method=method, granularity=granularity)
    assert ids.dtype == np.int64
    assert ids.size == count
    assert np.all(np.diff(ids) >= 0)
    assert ids.size == 0 or (ids.min() >= 0 and ids.max() < 13)


def test_upsampling_gives_every_sample_whole_times_plus_at_most_one() -> None:
    draws = np.bincount(_draw(2 * 13 + 5), minlength=13)
    assert set(draws.tolist()) == {2, 3}
    assert np.count_nonzero(draws == 3) == 5


def test_exact_multiple_repeats_every_sample() -> None:
    assert np.array_equal(_draw(3 * 13), np.repeat(np.arange(13), 3))


def test_balanced_covers_every_sample_once_when_rest_divides_n() -> None:
    shards = np.array([5, 7])  # 12 samples, 4 per epoch: 3 epochs per cycle
    for cycle in range(2):
        epochs = [_draw(4, epoch=3 * cycle + e, shards=shards) for e in range(3)]
        assert np.array_equal(np.sort(np.concatenate(epochs)), np.arange(12))


def test_balanced_draws_every_sample_before_any_sample_again() -> None:
    for shards, granularity, whole, rest in _random_layouts(120):
        n = int(shards.sum())
        total = np.zeros(n, dtype=np.int64)
        for epoch in range(n + 2):
            extra = np.bincount(
                _draw(whole * n + rest, epoch=epoch, granularity=granularity, shards=shards), minlength=n
            )
            total += extra - whole
            assert total.max() - total.min() <= 1, (shards.tolist(), granularity, rest, epoch)


def test_fixed_is_the_same_every_epoch() -> None:
    first = _draw(5, method="fixed", granularity=2)
    for epoch in range(1, 6):
        assert np.array_equal(_draw(5, epoch=epoch, method="fixed", granularity=2), first)


def test_fixed_matches_balanced_epoch_zero() -> None:
    assert np.array_equal(_draw(5, method="fixed"), _draw(5, method="balanced"))


def test_balanced_changes_between_epochs() -> None:
    assert not np.array_equal(_draw(5, epoch=0), _draw(5, epoch=1))


def test_granularity_takes_whole_runs_within_shards_except_at_window_cuts() -> None:
    shards = np.array([10, 23, 0, 17, 50])
    g = 4
    starts = np.concatenate([[0], np.cumsum(shards)[:-1]])
    run_first = np.concatenate([np.arange(s, s + k, g) for s, k in zip(starts, shards, strict=True)])
    run_end = np.minimum(run_first + g, np.repeat(starts + shards, -(-shards // g)))
    for epoch in range(6):
        chosen = np.zeros(100, dtype=bool)
        chosen[_draw(37, epoch=epoch, granularity=g, shards=shards)] = True
        taken = np.add.reduceat(chosen, run_first)  # (num_runs,) chosen samples per run
        partial = np.flatnonzero((taken > 0) & (taken < run_end - run_first))
        # A cyclic window is at most two ranges, each cut at both ends.
        assert partial.size <= 4
        for run in partial:  # a cut run keeps a contiguous head or tail
            picked = np.flatnonzero(chosen[run_first[run] : run_end[run]])
            assert np.array_equal(picked, np.arange(picked[0], picked[-1] + 1))


def test_coarser_granularity_touches_fewer_shards() -> None:
    shards = np.full(200, 50)

    def shards_touched(granularity: int) -> int:
        return np.unique(_draw(500, granularity=granularity, shards=shards) // 50).size

    assert shards_touched(50) <= 11 < 150 < shards_touched(1)


def test_same_arguments_give_the_same_samples() -> None:
    assert np.array_equal(_draw(5, epoch=2, granularity=3), _draw(5, epoch=2, granularity=3))


def test_seed_and_stream_change_the_selection() -> None:
    shards = np.array([100])
    base = _draw(20, shards=shards)
    assert not np.array_equal(base, _draw(20, shards=shards, seed=8))
    other_stream = epoch_stream_samples(
        100, 20, samples_per_shard=shards, method="balanced", granularity=1, seed=7, epoch=0, stream_index=2
    )
    assert not np.array_equal(base, other_stream)


def test_golden_values_do_not_change_between_versions() -> None:
    assert [_draw(5, epoch=e).tolist() for e in range(3)] == [
        [0, 2, 4, 10, 11],
        [1, 5, 6, 7, 12],
        [2, 3, 8, 9, 10],
    ]
    # Runs of 3: [4, 5, 6] whole, then [10, 11, 12] cut after 2; the next epoch resumes at 12.
    assert [_draw(5, epoch=e, granularity=3).tolist() for e in range(3)] == [
        [4, 5, 6, 10, 11],
        [0, 1, 2, 3, 12],
        [4, 5, 7, 8, 9],
    ]
    assert _draw(17, epoch=5, method="fixed", granularity=2).tolist() == [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 10, 10, 11, 12, 12,
    ]  # fmt: skip


def test_chunking_does_not_change_the_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    shards = np.array([30, 7, 41])
    expected = [_draw(50, epoch=e, granularity=g, shards=shards) for e in range(3) for g in (1, 4)]
    monkeypatch.setattr(sampling, "_CHUNK", 3)
    got = [_draw(50, epoch=e, granularity=g, shards=shards) for e in range(3) for g in (1, 4)]
    assert all(np.array_equal(a, b) for a, b in zip(expected, got, strict=True))


def test_shard_lookup_matches_binary_search() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        shards = rng.integers(0, rng.integers(1, 50), rng.integers(1, 200))
        if shards.sum() == 0:
            continue
        layout = sampling._RunLayout(shards.astype(np.int64), int(rng.integers(1, 7)))
        runs = np.arange(layout.num_runs)
        assert np.array_equal(layout.shard_of(runs), np.searchsorted(layout.run_end, runs, side="right"))


def test_large_stream_draws_distinct_sorted_ids() -> None:
    # Its speed (about 0.1 s for 10M) is measured by benchmarks/bench_order.py, not asserted here.
    n = 10**7
    ids = epoch_stream_samples(
        n, n // 2, samples_per_shard=np.full(1000, n // 1000), method="balanced", granularity=1, seed=0, epoch=1,
        stream_index=0,
    )  # fmt: skip
    assert ids.size == n // 2
    assert ids.min() >= 0 and ids.max() < n
    assert np.all(np.diff(ids) > 0)  # sorted, and no id twice


def test_empty_stream_with_zero_count_gives_nothing() -> None:
    ids = epoch_stream_samples(
        0,
        0,
        samples_per_shard=np.array([0]),
        method="balanced",
        granularity=1,
        seed=0,
        epoch=0,
        stream_index=0,
    )
    assert ids.size == 0 and ids.dtype == np.int64


def test_epoch_samples_draws_each_stream_with_its_index() -> None:
    shards = [np.array([3, 4]), np.array([10])]
    got = epoch_samples([7, 10], [3, 15], shards, method="balanced", granularity=1, seed=5, epoch=2)
    # Golden values: 3 of stream 0's 7; all of stream 1's 10 once and 5 of them again.
    assert [ids.tolist() for ids in got] == [[1, 2, 4], [0, 1, 1, 2, 3, 3, 4, 4, 5, 5, 6, 7, 7, 8, 9]]
    # Two streams of the same shape draw apart: each stream's draw is keyed by its index.
    twins = epoch_samples([10, 10], [4, 4], [np.array([10])] * 2, method="balanced", granularity=1, seed=5, epoch=2)
    assert [ids.tolist() for ids in twins] == [[2, 3, 7, 8], [0, 2, 3, 4]]


# Argument errors.


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"granularity": 0}, r"granularity: expected an int >= 1, found 0"),
        ({"method": "random"}, r"sampling_method: expected one of \('balanced', 'fixed'\), found 'random'"),
        ({"count": -1}, r"count: expected an int >= 0, found -1"),
        ({"count": 2.5}, r"count: expected an int >= 0, found 2.5"),
        ({"epoch": -1}, r"epoch: expected an int >= 0, found -1"),
        (
            {"samples_per_shard": np.array([4, 4])},
            r"expected counts >= 0 summing to stream_size 13, found sum 8",
        ),
        (
            {"samples_per_shard": np.array([[13]])},
            r"samples_per_shard: expected a 1-D integer array, found shape \(1, 1\)",
        ),
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict, message: str) -> None:
    arguments = {
        "count": 5,
        "samples_per_shard": SHARDS,
        "method": "balanced",
        "granularity": 1,
        "seed": 0,
        "epoch": 0,
        "stream_index": 0,
    }
    arguments.update(kwargs)
    count = arguments.pop("count")
    with pytest.raises(ConfigError, match=message):
        epoch_stream_samples(13, count, **arguments)  # type: ignore[arg-type]


def test_drawing_from_an_empty_stream_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"count: expected 0 for an empty stream, found 3"):
        epoch_stream_samples(
            0,
            3,
            samples_per_shard=np.array([0]),
            method="fixed",
            granularity=1,
            seed=0,
            epoch=0,
            stream_index=0,
        )


def test_epoch_samples_rejects_mismatched_lengths() -> None:
    with pytest.raises(
        ConfigError, match=r"expected one size, count and shard list per stream, found 2, 1 and 2"
    ):
        epoch_samples(
            [1, 2], [1], [np.array([1]), np.array([2])], method="fixed", granularity=1, seed=0, epoch=0
        )
