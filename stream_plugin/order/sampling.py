"""Per-epoch sample selection: which samples of a stream fill its count for a given epoch.

A stream of ``n`` samples that contributes ``count = whole * n + rest`` samples to an epoch gives
every sample ``whole`` times, plus ``rest`` more samples chosen from a permutation of the stream
that is fixed by ``(seed, stream)`` and never changes between epochs:

- ``"fixed"``: the first ``rest`` positions of the permutation, so the same samples every epoch.
- ``"balanced"``: epoch ``e`` takes positions ``[e * rest, (e + 1) * rest)`` of the permutation,
  cyclically. Consecutive epochs tile the permutation, so every sample is drawn before any sample
  is drawn again. This is stronger than MosaicML 0.13's ``balanced``, which draws an independent
  random subset each epoch (some samples repeat before others are seen).

``granularity`` g permutes runs of up to g consecutive samples of a shard instead of single
samples, so an epoch touches fewer shards. Positions count samples, not runs: a window may start
or end inside a run, and the run is cut there, so exactly ``rest`` samples are drawn.

The permutation is a keyed bijection (``random.permute``) evaluated only at the positions needed,
never materialised: a 10**8-sample stream costs O(n) memory for the result and a few passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np

from stream_plugin.errors import ConfigError
from stream_plugin.order.random import permute, unpermute

SamplingMethod = Literal["balanced", "fixed"]
SAMPLING_METHODS: tuple[str, ...] = get_args(SamplingMethod)
_PURPOSE = "stream_sample"
_CHUNK = 1 << 22  # window offsets handled at a time


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(
            f"{name}: expected an int >= {minimum}, found {value!r}; pass a whole number >= {minimum}"
        )
    return int(value)


def _check_shards(samples_per_shard: np.ndarray, stream_size: int) -> np.ndarray:
    shards = np.asarray(samples_per_shard)
    if shards.ndim != 1 or shards.dtype.kind not in "iu":
        raise ConfigError(
            f"samples_per_shard: expected a 1-D integer array, found shape {shards.shape} dtype {shards.dtype}; "
            f"pass one sample count per shard"
        )
    shards = shards.astype(np.int64)
    if (shards < 0).any() or int(shards.sum()) != stream_size:
        raise ConfigError(
            f"samples_per_shard: expected counts >= 0 summing to stream_size {stream_size}, "
            f"found sum {int(shards.sum())} (min {shards.min(initial=0)}); pass this stream's shard sizes"
        )
    return shards


class _RunLayout:
    """Runs of up to ``granularity`` consecutive samples within each shard, numbered in shard order."""

    def __init__(self, samples_per_shard: np.ndarray, granularity: int) -> None:
        self.granularity = granularity
        self.shard_end = np.cumsum(samples_per_shard)  # (num_shards,) one past each shard's last sample
        self.shard_start = self.shard_end - samples_per_shard
        runs_per_shard = -(-samples_per_shard // granularity)  # ceil; 0 for an empty shard
        self.run_end = np.cumsum(runs_per_shard)  # (num_shards,) one past each shard's last run
        self.run_start = self.run_end - runs_per_shard
        self.num_runs = int(self.run_end[-1]) if self.run_end.size else 0
        # Only a shard's last run can be short; its deficit shifts the sample offsets of later runs.
        tail = samples_per_shard % granularity
        has_short_run = (tail > 0) & (runs_per_shard > 0)
        self.short_run_ids = self.run_end[has_short_run] - 1
        self.short_run_deficits = (granularity - tail)[has_short_run]
        # A binary search per run costs ~70 ns on random ids, so look the shard up in a table of
        # buckets of 2**shift runs (about 8 per shard) and step over the few boundaries inside one.
        self.bucket_shift = max(0, (self.num_runs // (8 * max(1, samples_per_shard.size))).bit_length() - 1)
        bucket_first_run = np.arange(0, self.num_runs, 1 << self.bucket_shift, dtype=np.int64)
        self.shard_of_bucket = np.searchsorted(self.run_end, bucket_first_run, side="right")

    def shard_of(self, run_ids: np.ndarray) -> np.ndarray:
        """Return the shard holding each run (same as ``searchsorted(run_end, run_ids, "right")``)."""
        shard = self.shard_of_bucket[run_ids >> self.bucket_shift]
        behind = np.flatnonzero(self.run_end[shard] <= run_ids)  # runs past their bucket's first shard
        while behind.size:
            shard[behind] += 1
            behind = behind[self.run_end[shard[behind]] <= run_ids[behind]]
        return shard

    def runs(self, run_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (first sample, length) of each run, int64 arrays shaped like ``run_ids``."""
        shard = self.shard_of(run_ids)  # skips empty shards
        first = self.shard_start[shard] + (run_ids - self.run_start[shard]) * self.granularity
        length = np.minimum(self.granularity, self.shard_end[shard] - first)
        return first, length


class _PermutedRuns:
    """The stream's runs laid end to end in permuted order, addressed by sample offset."""

    def __init__(self, layout: _RunLayout, seed: int, stream_index: int) -> None:
        self.layout = layout
        self.key = (seed, 0, _PURPOSE, stream_index)  # epoch 0: the permutation never changes
        # Where the short runs landed; sorted so the deficit before any position is a prefix sum.
        positions = unpermute(layout.short_run_ids, layout.num_runs, *self.key)
        order = np.argsort(positions)
        self.short_positions = positions[order]
        self.deficit_before = np.concatenate([[0], np.cumsum(layout.short_run_deficits[order])])

    def offset(self, position: int) -> int:
        """Sample offset at which the run at ``position`` starts."""
        shorter_before = int(np.searchsorted(self.short_positions, position, side="left"))
        return self.layout.granularity * position - int(self.deficit_before[shorter_before])

    def position_of(self, offset: int) -> int:
        """Position of the run that holds sample offset ``offset`` (bisection; offsets increase)."""
        low, high = 0, self.layout.num_runs - 1
        while low < high:
            middle = (low + high + 1) // 2
            if self.offset(middle) <= offset:
                low = middle
            else:
                high = middle - 1
        return low

    def samples(self, begin: int, end: int) -> np.ndarray:
        """Sample ids at offsets ``[begin, end)`` of the permuted sequence (0 <= begin < end <= n)."""
        first_position, last_position = self.position_of(begin), self.position_of(end - 1)
        run_ids = permute(np.arange(first_position, last_position + 1), self.layout.num_runs, *self.key)
        first, length = self.layout.runs(run_ids)  # (num_window_runs,) each
        # Cut the window's first run at its start and its last run at its end.
        skip = begin - self.offset(first_position)
        first[0] += skip
        length[0] -= skip
        length[-1] = end - self.offset(last_position) - (skip if first_position == last_position else 0)
        return _expand_ranges(first, length)


def _expand_ranges(first: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Concatenate ``range(first[i], first[i] + length[i])`` for every i (lengths >= 1), as int64."""
    ids = np.ones(int(length.sum()), dtype=np.int64)
    ids[0] = first[0]
    # At each range boundary, jump from the last id of one range to the first id of the next.
    boundaries = np.cumsum(length[:-1])
    ids[boundaries] = first[1:] - (first[:-1] + length[:-1] - 1)
    return np.cumsum(ids, out=ids)


def _window(n: int, begin: int, size: int) -> list[tuple[int, int]]:
    """Split the cyclic window of ``size`` offsets starting at ``begin`` into 1 or 2 plain ranges."""
    end = begin + size
    return [(begin, end)] if end <= n else [(begin, n), (0, end - n)]


def epoch_stream_samples(
    stream_size: int,
    count: int,
    *,
    samples_per_shard: np.ndarray,
    method: SamplingMethod,
    granularity: int,
    seed: int,
    epoch: int,
    stream_index: int,
) -> np.ndarray:
    """Return the ``count`` stream-local sample ids of this stream in ``epoch``, sorted, int64.

    Ids repeat when ``count`` exceeds the stream size (upsampling). Sorted order keeps shard
    locality; shuffling is a later step.
    """
    n = _check_count("stream_size", stream_size, 0)
    count = _check_count("count", count, 0)
    granularity = _check_count("granularity", granularity, 1)
    epoch = _check_count("epoch", epoch, 0)
    stream_index = _check_count("stream_index", stream_index, 0)
    if method not in SAMPLING_METHODS:
        raise ConfigError(
            f"sampling_method: expected one of {SAMPLING_METHODS}, found {method!r}; pick one of those"
        )
    shards = _check_shards(samples_per_shard, n)
    if n == 0:
        if count:
            raise ConfigError(
                f"count: expected 0 for an empty stream, found {count}; give this stream weight 0"
            )
        return np.empty(0, dtype=np.int64)

    whole, rest = divmod(count, n)
    chosen = np.zeros(n, dtype=bool)  # (n,) whether a sample gets one extra draw this epoch
    if rest:
        begin = 0 if method == "fixed" else (epoch * rest) % n
        _mark_window(chosen, begin, rest, shards, granularity, seed, stream_index)
    if whole == 0:
        return np.flatnonzero(chosen).astype(np.int64, copy=False)
    return _repeat_sorted(chosen, whole)


def _mark_window(
    chosen: np.ndarray,
    begin: int,
    size: int,
    shards: np.ndarray,
    granularity: int,
    seed: int,
    stream_index: int,
) -> None:
    """Set ``chosen`` for the samples at cyclic offsets ``[begin, begin + size)`` of the permuted stream."""
    n = chosen.size
    # Walk whichever of the window and its complement is smaller; both are cyclic windows.
    complement = size > n - size
    if complement:
        chosen[:] = True
        begin, size = (begin + size) % n, n - size
    key = (seed, 0, _PURPOSE, stream_index)
    runs = None if granularity == 1 else _PermutedRuns(_RunLayout(shards, granularity), seed, stream_index)
    for window_begin, window_end in _window(n, begin, size):
        # Chunks bound the temporary memory and keep the working set in cache.
        for chunk_begin in range(window_begin, window_end, _CHUNK):
            chunk_end = min(chunk_begin + _CHUNK, window_end)
            if runs is None:  # runs of one sample: offsets are positions, no layout needed
                ids = permute(np.arange(chunk_begin, chunk_end), n, *key)
            else:
                ids = runs.samples(chunk_begin, chunk_end)
            chosen[ids] = not complement


def _repeat_sorted(chosen: np.ndarray, whole: int) -> np.ndarray:
    """Return each sample id ``whole + chosen[id]`` times, ascending, as int64."""
    # Equal to np.repeat(np.arange(n), whole + chosen) but ~4x faster: write a 1 where each id
    # starts (after id 0), then a running sum turns those steps into the ids.
    ends = chosen.astype(np.int64)
    ends += whole
    np.cumsum(ends, out=ends)  # (n,) one past the last copy of each id
    ids = np.zeros(int(ends[-1]), dtype=np.int64)
    ids[ends[:-1]] = 1
    return np.cumsum(ids, out=ids)


def epoch_samples(
    stream_sizes: Sequence[int],
    counts: Sequence[int] | np.ndarray,
    samples_per_shard_per_stream: Sequence[np.ndarray],
    *,
    method: SamplingMethod,
    granularity: int,
    seed: int,
    epoch: int,
) -> list[np.ndarray]:
    """Return :func:`epoch_stream_samples` for every stream, in stream order."""
    if not len(stream_sizes) == len(counts) == len(samples_per_shard_per_stream):
        raise ConfigError(
            f"epoch_samples: expected one size, count and shard list per stream, found {len(stream_sizes)}, "
            f"{len(counts)} and {len(samples_per_shard_per_stream)}; pass equal-length sequences"
        )
    return [
        epoch_stream_samples(
            size,
            count,
            samples_per_shard=shards,
            method=method,
            granularity=granularity,
            seed=seed,
            epoch=epoch,
            stream_index=stream_index,
        )
        for stream_index, (size, count, shards) in enumerate(
            zip(stream_sizes, counts, samples_per_shard_per_stream, strict=True)
        )
    ]
