"""One canonical node's shuffled span of one group, read front to back in bounded pieces.

``plan._fill_from_span`` copies a whole span and shuffles it in place. The built-in shuffles other
than ``permute`` only ever permute inside *segments* (blocks of ``block_size`` samples, or shard runs)
with one generator drawn segment after segment, so the span can instead be produced a few segments at
a time: each piece is copied, shuffled with the same draws, handed out and forgotten. The values are
bit-for-bit those of the whole shuffle; memory is one piece, not the span.

Skipping ahead (a resume, or a rank whose columns start later) still has to make the generator's
draws for the skipped segments, but not copy their samples: Fisher-Yates draws depend only on the
segment's length (``shuffle.skip_shuffles`` makes them on a one-cell view), and the vectorised path's
uniform floats are one 64-bit step each.

``permute`` and shuffles registered by users have no segments: their span is built whole, once.
``none`` (no shuffle) needs no piece: each read copies exactly its samples from the runs.
"""

from __future__ import annotations

import numpy as np

from stream_plugin.order.layout import ShardRuns
from stream_plugin.order.random import rng_for
from stream_plugin.order.shuffle import (
    _LOOP_SEGMENTS_MAX,
    SpanKey,
    get_shuffle,
    permute_segments,
    skip_shuffles,
)

# Samples decoded per piece: a few MiB, and enough for the per-piece Python work not to show.
PIECE_SAMPLES = 1 << 21

_SEGMENTED = {"block": "block_shuffle", "intra_shard": "intra_shard_shuffle"}  # algorithm -> rng purpose


class SpanReader:
    """Group positions ``[begin, end)`` of ``runs``, shuffled as ``algorithm`` does, read in order."""

    def __init__(
        self,
        runs: ShardRuns,
        begin: int,
        end: int,
        key: SpanKey,
        algorithm: str,
        dtype: np.dtype,
        *,
        piece_samples: int = PIECE_SAMPLES,
    ) -> None:
        self._runs, self._begin, self._length = runs, begin, end - begin
        self._key, self._algorithm, self._dtype = key, algorithm, dtype
        self._piece_samples = piece_samples
        self._piece = np.zeros(0, dtype=dtype)  # the decoded samples at span positions [_piece_start, ...)
        self._piece_start = 0
        self._position = 0  # next span position read() returns
        self._bounds = self._segment_bounds()  # int64 (num_segments + 1,) or None: built whole
        self._next_segment = 0
        self._rng: np.random.Generator | None = None
        self._vectorised = False
        if self._bounds is not None and algorithm in _SEGMENTED:
            self._rng = rng_for(key.seed, key.epoch, _SEGMENTED[algorithm], *key.span)
            self._vectorised = len(self._bounds) - 1 > _LOOP_SEGMENTS_MAX

    @property
    def position(self) -> int:
        return self._position

    def _segment_bounds(self) -> np.ndarray | None:
        if self._algorithm == "none":  # no shuffle: ``read`` copies what it is asked for, no segments
            return np.array([0, self._length], dtype=np.int64)
        if self._algorithm == "block":
            bounds = np.arange(0, self._length, self._key.block_size, dtype=np.int64)  # (num_blocks,)
            return np.append(bounds, self._length)
        if self._algorithm == "intra_shard":
            return self._shard_bounds()
        return None

    def _shard_bounds(self) -> np.ndarray:
        """Offsets in the span where each shard run starts, ending with its length (as ``copy_range``)."""
        if not self._length:
            return np.zeros(1, dtype=np.int64)
        cum, begin, end = self._runs.cum, self._begin, self._begin + self._length
        first = int(np.searchsorted(cum, begin, side="right")) - 1
        last = int(np.searchsorted(cum, end, side="left"))
        return np.clip(cum[first : last + 1], begin, end) - begin  # (k + 1,)

    def read(self, count: int) -> np.ndarray:
        """The next ``count`` samples of the shuffled span: ``dtype`` (count,)."""
        out = np.empty(count, dtype=self._dtype)
        if self._algorithm == "none":  # the span in shard order: copied straight, no piece ahead
            start = self._begin + self._position
            self._runs.copy_range(start, start + count, out)
            self._position += count
            return out
        filled = 0
        while filled < count:
            offset = self._position - self._piece_start
            if offset >= len(self._piece):
                self._decode_next()
                continue
            take = min(count - filled, len(self._piece) - offset)
            out[filled : filled + take] = self._piece[offset : offset + take]
            filled += take
            self._position += take
        return out

    def skip(self, count: int) -> None:
        """Move ``count`` samples on without copying the whole segments passed over."""
        target = self._position + count
        assert target <= self._length
        if self._algorithm == "none":
            self._position = target
            return
        if self._bounds is not None and target > self._piece_start + len(self._piece):
            stop = int(np.searchsorted(self._bounds, target, side="right")) - 1  # segment holding target
            self._advance_to(max(stop, self._next_segment))
        while target > self._piece_start + len(self._piece):
            self._decode_next()
        self._position = target

    def _advance_to(self, segment: int) -> None:
        """Make the generator's draws of segments [_next_segment, segment) without their samples."""
        assert self._bounds is not None
        lengths = np.diff(self._bounds[self._next_segment : segment + 1])  # (k,)
        if self._rng is None:  # nothing drawn: nothing to replay
            pass
        elif self._vectorised:
            self._rng.bit_generator.advance(int(lengths.sum()))  # type: ignore[attr-defined]
        else:
            skip_shuffles(self._rng, lengths.tolist())
        self._piece = np.zeros(0, dtype=self._dtype)
        self._piece_start = int(self._bounds[segment])
        self._next_segment = segment

    def _decode_next(self) -> None:
        """Replace the piece with the next whole segments (or the whole span, built at once)."""
        start = self._piece_start + len(self._piece)
        if self._bounds is None:
            assert start == 0, "a span without segments is built whole, once"
            span = np.empty(self._length, dtype=self._dtype)
            bounds = self._runs.copy_range(self._begin, self._begin + self._length, span)
            get_shuffle(self._algorithm)(span, bounds, self._key)
            self._piece, self._piece_start = span, 0
            return
        first = self._next_segment
        assert int(self._bounds[first]) == start
        stop = int(np.searchsorted(self._bounds, start + self._piece_samples, side="right")) - 1
        stop = min(max(stop, first + 1), len(self._bounds) - 1)  # at least one segment
        lo, hi = start, int(self._bounds[stop])
        piece = np.empty(hi - lo, dtype=self._dtype)
        self._runs.copy_range(self._begin + lo, self._begin + hi, piece)
        self._shuffle_segments(piece, self._bounds[first : stop + 1] - lo, first)
        self._piece, self._piece_start, self._next_segment = piece, lo, stop

    def _shuffle_segments(self, piece: np.ndarray, bounds: np.ndarray, first_segment: int) -> None:
        """``shuffle.shuffle_segments`` for a run of whole segments, drawing where the whole span would."""
        if self._rng is None:  # ``none``: the span stays in shard order
            return
        permute_segments(piece, bounds, self._rng, vectorised=self._vectorised, first_segment=first_segment)
