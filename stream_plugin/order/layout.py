"""From chosen samples to shard-ordered groups, cut into one contiguous span per canonical node.

A *group* is the set of samples whose spans are cut together: all streams mixed (batching
``random``) or one stream (the other batching methods). Within a group the chosen samples are laid
out shard by shard, in a shard order drawn once per training run from the seed (``shard_placement``); the
group is then cut into consecutive spans, one per canonical node, whose lengths the batching method
fixes. A span therefore holds whole shards except at its two ends, so a node downloads about 1/C of
the group's shards, and the same 1/C every epoch: each epoch only permutes the shard runs inside each
node's span (``node_shard_order``; a shard cut by a span's end is two pieces, each kept in its node).
Only a change of the chosen counts (``choose``, ``epoch_size``, stratified slot draws) moves the cuts,
by a few samples, so a shard near a cut may change node.

Nothing here materialises a whole-epoch index array: a group is a list of shard *runs* (slices of
the per-stream chosen arrays) and a span is copied straight into its destination.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from stream_plugin.errors import ConfigError
from stream_plugin.order.random import rng_for
from stream_plugin.order.shuffle import shuffle_segments

# Sortedness is checked in chunks so the check never allocates a whole-epoch temporary.
_CHECK_CHUNK = 1 << 22
# Past this many shard runs in one range, ``copy_range`` gathers with whole-array operations.
_LOOP_RUNS_MAX = 64


@dataclass(frozen=True, eq=False)
class DatasetShape:
    """Shard sizes of all streams concatenated (stream 0's shards first, then stream 1's, ...).

    int64 arrays are kept as given, not copied: do not change them afterwards.
    """

    samples_per_shard: np.ndarray  # int64 (num_shards,)
    stream_of_shard: np.ndarray  # int (num_shards,), non-decreasing

    def __post_init__(self) -> None:
        sizes = np.asarray(self.samples_per_shard)
        streams = np.asarray(self.stream_of_shard)
        if sizes.ndim != 1 or streams.shape != sizes.shape:
            raise ConfigError(
                f"DatasetShape: expected samples_per_shard and stream_of_shard of the same 1-D shape, "
                f"found {sizes.shape} and {streams.shape}; pass one entry per shard"
            )
        if len(sizes) and (sizes.min() < 0 or streams.min() < 0 or (streams[1:] < streams[:-1]).any()):
            raise ConfigError(
                "DatasetShape: expected sample counts >= 0 and stream ids >= 0 in non-decreasing order, "
                f"found counts min {sizes.min()} and stream ids {streams[:8].tolist()}...; "
                "concatenate the streams' shards in stream order"
            )
        # No copies of int64 input: a million-shard index's columns are views of the node's kept parse.
        object.__setattr__(self, "samples_per_shard", sizes.astype(np.int64, copy=False))
        object.__setattr__(self, "stream_of_shard", streams.astype(np.int64, copy=False))

    @property
    def num_shards(self) -> int:
        return len(self.samples_per_shard)

    @property
    def num_streams(self) -> int:
        return int(self.stream_of_shard[-1]) + 1 if self.num_shards else 0

    @property
    def num_samples(self) -> int:
        return int(self.samples_per_shard.sum())

    @cached_property
    def shard_offsets(self) -> np.ndarray:
        """Global id of each shard's first sample: int64 (num_shards + 1,), computed once."""
        offsets = np.empty(self.num_shards + 1, dtype=np.int64)
        offsets[0] = 0
        np.cumsum(self.samples_per_shard, out=offsets[1:])
        offsets.setflags(write=False)  # shared by every user of the shape
        return offsets

    def stream_shard_range(self, stream: int) -> tuple[int, int]:
        """The [first, last + 1) shard ids of ``stream``."""
        first, stop = np.searchsorted(self.stream_of_shard, [stream, stream + 1])
        return int(first), int(stop)


@dataclass(frozen=True)
class AllSamples:
    """Every stream-local id of a stream once, ascending: ``np.arange(size)``, never materialised.

    A sampler hands this over instead of an array when a stream contributes each of its samples
    exactly once, so planning a billion-sample epoch does not start with an 8 GB id array.
    """

    size: int

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, piece: slice) -> np.ndarray:
        start, stop, step = piece.indices(self.size)
        return np.arange(start, stop, step, dtype=np.int64)


Chosen = np.ndarray | AllSamples  # one stream's chosen stream-local ids, sorted


@dataclass(frozen=True, eq=False)
class ShardRuns:
    """One group's chosen samples as runs of consecutive chosen ids of one shard, in read order.

    Never write to the columns: they are views of the shape's offsets and broadcast constants where they can be.
    """

    chosen: tuple[Chosen, ...]  # per stream: sorted stream-local ids (n_s,)
    stream: np.ndarray  # int64 (R,): which ``chosen`` array the run slices
    start: np.ndarray  # int64 (R,): run = chosen[stream][start:stop]
    stop: np.ndarray  # int64 (R,)
    shard: np.ndarray  # int64 (R,): global shard id of the run
    id_offset: np.ndarray  # int64 (R,): added to stream-local ids to make global ids
    cum: np.ndarray  # int64 (R + 1,): group position where each run starts

    @property
    def num_samples(self) -> int:
        return int(self.cum[-1])

    def reordered(self, order: np.ndarray) -> ShardRuns:
        """The same runs read in ``order`` (a permutation of run indices)."""
        return self.pieces(order)

    def pieces(
        self,
        run: np.ndarray,
        partial: np.ndarray | None = None,
        skip: np.ndarray | None = None,
        length: np.ndarray | None = None,
    ) -> ShardRuns:
        """Runs made of pieces of these, in order: piece k is run ``run[k]`` (int64 (K,)), whole except at
        the positions ``partial``, where piece ``partial[j]`` is ``length[j]`` ids of its run after the
        first ``skip[j]`` (int64 (m,) each)."""
        start, stop = self.start[run], self.stop[run]  # (K,) each, fresh copies
        if partial is not None and skip is not None and length is not None:
            start[partial] += skip
            stop[partial] = start[partial] + length
        cum = np.zeros(len(run) + 1, dtype=np.int64)  # (K + 1,)
        np.subtract(stop, start, out=cum[1:])  # each piece's length, summed in place below
        np.cumsum(cum[1:], out=cum[1:])
        return ShardRuns(
            chosen=self.chosen,
            stream=_take(self.stream, run),
            start=start,
            stop=stop,
            shard=self.shard[run],
            id_offset=_take(self.id_offset, run),
            cum=cum,
        )

    def copy_range(self, begin: int, end: int, out: np.ndarray) -> np.ndarray:
        """Write global ids at group positions [begin, end) into ``out`` (1-D, length end - begin).

        Returns the shard bounds of the range: int64 (k + 1,) offsets in ``out`` where each run
        piece starts, ending with ``end - begin``.
        """
        assert len(out) == end - begin and 0 <= begin <= end <= self.num_samples
        if begin == end:
            return np.zeros(1, dtype=np.int64)
        first, last, bounds = self._range_runs(begin, end)
        if last - first > _LOOP_RUNS_MAX:
            self._copy_runs_vectorised(first, last, begin, bounds, out)
            return bounds
        for run, lo, hi in zip(range(first, last), bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            base = int(self.start[run]) + (begin - int(self.cum[run]) if run == first else 0)
            local = self.chosen[int(self.stream[run])][base : base + hi - lo]
            np.add(local, int(self.id_offset[run]), out=out[lo:hi], casting="unsafe")
        return bounds

    def _range_runs(self, begin: int, end: int) -> tuple[int, int, np.ndarray]:
        """The runs [first, last) that group positions [begin, end) (not empty) cross, and ``copy_range``'s
        bounds of their pieces: int64 (last - first + 1,)."""
        first = int(np.searchsorted(self.cum, begin, side="right")) - 1
        last = int(np.searchsorted(self.cum, end, side="left"))  # exclusive run index
        return first, last, np.clip(self.cum[first : last + 1], begin, end) - begin

    def as_shard_ids(self) -> ShardRuns:
        """These runs read as the shard id of each sample instead of its id (``ShardIdRuns``)."""
        return ShardIdRuns(self.chosen, self.stream, self.start, self.stop, self.shard, self.id_offset, self.cum)

    def _copy_runs_vectorised(
        self, first: int, last: int, begin: int, bounds: np.ndarray, out: np.ndarray
    ) -> None:
        """``copy_range``'s loop over runs [first, last) as a few whole-array operations per stream."""
        lengths = np.diff(bounds)  # (k,)
        base = self.start[first:last].copy()  # (k,) position in ``chosen`` of each piece's first id
        base[0] += begin - int(self.cum[first])
        streams = self.stream[first:last]
        present = np.flatnonzero(np.bincount(streams)).tolist()  # the streams of these runs
        if all(isinstance(self.chosen[stream], AllSamples) for stream in present):
            _fill_counting_runs(out, bounds, base + self.id_offset[first:last])
            return
        # Position in its ``chosen`` array of every output id: base of its piece + offset in the piece.
        position = np.arange(len(out), dtype=np.int64) + np.repeat(base - bounds[:-1], lengths)  # (n,)
        offset = np.repeat(self.id_offset[first:last], lengths)  # (n,)
        for stream in present:
            chosen = self.chosen[stream]
            mask = np.repeat(streams == stream, lengths)  # (n,)
            local = position[mask] if isinstance(chosen, AllSamples) else chosen[position[mask]]
            out[mask] = local + offset[mask]


@dataclass(frozen=True, eq=False)
class ShardIdRuns(ShardRuns):
    """Runs whose ``copy_range`` writes each sample's shard id, not its id: the same positions, so a span
    shuffled alike reads as the shards of its samples. The node's forecast reads these (it needs the
    shard of each read), rather than mapping tens of millions of ids back to their shards."""

    def copy_range(self, begin: int, end: int, out: np.ndarray) -> np.ndarray:
        """Write the shard id of each sample at group positions [begin, end) into ``out``; returns the
        bounds ``ShardRuns.copy_range`` does."""
        assert len(out) == end - begin and 0 <= begin <= end <= self.num_samples
        if begin == end:
            return np.zeros(1, dtype=np.int64)
        first, last, bounds = self._range_runs(begin, end)
        if last - first > _LOOP_RUNS_MAX:
            # As ``_fill_counting_runs`` (pieces never empty): each piece's shard as a running sum of the
            # steps between neighbouring pieces' shards, in place.
            shards = self.shard[first:last]  # (k,)
            out.fill(0)
            out[0] = shards[0]
            out[bounds[1:-1]] = np.diff(shards)  # (k - 1,)
            np.cumsum(out, dtype=out.dtype, out=out)
            return bounds
        for run, lo, hi in zip(range(first, last), bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            out[lo:hi] = self.shard[run]
        return bounds


def _fill_counting_runs(out: np.ndarray, bounds: np.ndarray, first_ids: np.ndarray) -> None:
    """Fill ``out`` with runs of consecutive ids: piece k, at ``out[bounds[k]:bounds[k + 1]]`` (never
    empty), counts up from ``first_ids[k]``. One running sum in place, no temporary of ``out``'s size:
    every step is 1 but the first of each piece, which jumps from the previous piece's last id. (In a
    narrow ``out`` the steps may wrap around, but every partial sum is an id of the range, so exact.)"""
    starts = bounds[:-1]  # (k,)
    out.fill(1)
    out[0] = first_ids[0]
    out[starts[1:]] = first_ids[1:] - (first_ids[:-1] + np.diff(starts) - 1)  # (k - 1,)
    np.cumsum(out, dtype=out.dtype, out=out)


def _take(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``values[order]``; a broadcast constant (one stream's column) stays one, of ``order``'s length."""
    if values.strides == (0,) and len(values):
        return np.broadcast_to(values[:1], (len(order),))
    return values[order]


def _check_chosen(stream: int, chosen: Chosen, num_samples: int) -> None:
    if isinstance(chosen, AllSamples):
        if chosen.size != num_samples:
            raise ConfigError(
                f"chosen_per_stream[{stream}]: expected AllSamples({num_samples}) (every sample of the "
                f"stream), found AllSamples({chosen.size}); pass an id array for a subset"
            )
        return
    if chosen.ndim != 1 or chosen.dtype.kind not in "iu":
        raise ConfigError(
            f"chosen_per_stream[{stream}]: expected a 1-D integer array, found shape {chosen.shape} "
            f"dtype {chosen.dtype}; pass the sampler's sorted stream-local ids"
        )
    if len(chosen) == 0:
        return
    if chosen[0] < 0 or chosen[-1] >= num_samples:
        raise ConfigError(
            f"chosen_per_stream[{stream}]: expected ids in [0, {num_samples}), found range "
            f"[{chosen[0]}, {chosen[-1]}]; pass stream-local ids, not global ones"
        )
    for begin in range(0, len(chosen) - 1, _CHECK_CHUNK):
        chunk = chosen[begin : begin + _CHECK_CHUNK + 1]
        if np.any(chunk[1:] < chunk[:-1]):
            raise ConfigError(
                f"chosen_per_stream[{stream}]: expected ids sorted ascending, found a descent near "
                f"position {begin}; sort the sampler's output (np.sort) before planning"
            )


def _as_chosen(chosen: object) -> Chosen:
    return chosen if isinstance(chosen, AllSamples) else np.asarray(chosen)


class _StreamRuns(NamedTuple):
    """One stream's part of ``ShardRuns``: int64 (R_s,) each (``stream`` and ``id_offset`` constant)."""

    stream: np.ndarray
    start: np.ndarray
    stop: np.ndarray
    shard: np.ndarray
    id_offset: np.ndarray
    edges: np.ndarray | None  # int64 (R_s + 1,): start, then the last stop, when every shard makes a run


def _stream_runs(shape: DatasetShape, offsets: np.ndarray, stream: int, chosen: Chosen) -> _StreamRuns:
    """The runs of one stream's chosen samples, in natural shard order.

    A million-shard stream makes a million runs: its start and stop are views of one array of edges,
    and its constant columns are broadcast, so that only the shard ids are a fresh array.
    """
    first, stop = shape.stream_shard_range(stream)
    stream_base = int(offsets[first])
    _check_chosen(stream, chosen, int(offsets[stop]) - stream_base)
    # Stream-local offset of each of the stream's shards, and where its ids fall in ``chosen``.
    local_edges = offsets[first : stop + 1] - stream_base if stream_base else offsets[first : stop + 1]  # (k + 1,)
    if isinstance(chosen, AllSamples):
        cut = local_edges  # id i sits at position i
    else:
        cut = np.searchsorted(chosen, local_edges).astype(np.int64, copy=False)  # (k + 1,)
    keep = cut[1:] > cut[:-1]  # shards with no chosen sample make no run
    if keep.all():
        start, stop_, shard, edges = cut[:-1], cut[1:], np.arange(first, stop, dtype=np.int64), cut
    else:
        start, stop_, shard, edges = cut[:-1][keep], cut[1:][keep], np.flatnonzero(keep) + first, None
    count = len(start)
    return _StreamRuns(
        stream=np.broadcast_to(np.int64(stream), (count,)),
        start=start,
        stop=stop_,
        shard=shard.astype(np.int64, copy=False),
        id_offset=np.broadcast_to(np.int64(stream_base), (count,)),
        edges=edges,
    )


def group_runs(shape: DatasetShape, chosen_per_stream: Sequence[Chosen], streams: Sequence[int]) -> ShardRuns:
    """The runs of ``streams``' chosen samples, in natural shard order."""
    offsets = shape.shard_offsets  # (num_shards + 1,)
    pieces = [_stream_runs(shape, offsets, stream, _as_chosen(chosen_per_stream[stream])) for stream in streams]
    chosen = tuple(_as_chosen(c) for c in chosen_per_stream)
    edges = pieces[0].edges if len(pieces) == 1 else None
    if edges is not None:  # one stream whose runs tile its chosen ids: their edges are the positions
        only = pieces[0]
        return ShardRuns(chosen, only.stream, only.start, only.stop, only.shard, only.id_offset, cum=edges)
    stream_ids, start, stop, shard, id_offset = (
        np.concatenate([np.zeros(0, dtype=np.int64)] + [piece[field] for piece in pieces]) for field in range(5)
    )
    cum = np.zeros(len(start) + 1, dtype=np.int64)  # (R + 1,)
    np.cumsum(stop - start, out=cum[1:])
    return ShardRuns(chosen, stream_ids, start, stop, shard, id_offset, cum=cum)


def shard_placement(num_shards: int, seed: int, group: int) -> np.ndarray:
    """The fixed shard order of ``group``: its shards' group-local indices, int64 (num_shards,).

    Drawn once per training run, from the seed alone (no epoch in the key), so cutting it into the
    canonical nodes' spans gives each node the same shards every epoch.
    """
    return rng_for(seed, 0, "shard_placement", group).permutation(num_shards)


def _placed_runs(runs: ShardRuns, shard_range: tuple[int, int], seed: int, group: int) -> np.ndarray:
    """Indices of ``runs`` (natural shard order) in the fixed shard order: int64 (R,).

    The placement permutes shards, not runs: a shard with no chosen sample this epoch leaves a gap,
    and every other shard keeps its place relative to the rest.
    """
    first, stop = shard_range
    local_order = shard_placement(stop - first, seed, group)  # (N_g,)
    num_runs = len(runs.shard)
    if num_runs == stop - first:  # every shard makes a run, in natural order: run r is shard first + r
        assert not num_runs or int(runs.shard[0]) == first
        return local_order
    run_of_shard = np.full(stop - first, -1, dtype=np.int64)  # (N_g,)
    run_of_shard[runs.shard - first] = np.arange(num_runs, dtype=np.int64)
    placed = run_of_shard[local_order]  # (N_g,): -1 where a shard has no run
    return placed[placed >= 0]


def node_shard_order(
    runs: ShardRuns,
    shard_range: tuple[int, int],
    span_begins: np.ndarray,
    seed: int,
    epoch: int,
    group: int,
) -> ShardRuns:
    """The runs of ``group`` in the order its canonical nodes read them in ``epoch``.

    ``runs`` are in natural shard order (``group_runs``), their shards within ``shard_range`` ([first,
    stop) global shard ids). ``span_begins``, int64 (C + 1,), says where each node's span starts in the
    group and where the last one ends. The runs are laid out in the fixed shard order
    (``shard_placement``) and cut at the nodes' boundaries; a run cut there becomes pieces, each kept
    in its node. Then the pieces of each node are permuted, keyed by the epoch. The last node's pieces
    include the group's samples past its span (whole-batch methods leave some unread), so which of its
    shards' samples wait for another epoch changes from epoch to epoch.
    """
    placed = _placed_runs(runs, shard_range, seed, group)  # (R,) run indices, in the fixed shard order
    num_runs = len(placed)
    cum = np.zeros(num_runs + 1, dtype=np.int64)  # (R + 1,): group position of each placed run
    np.cumsum((runs.stop - runs.start)[placed], out=cum[1:])
    boundaries = np.asarray(span_begins, dtype=np.int64)[1:-1]  # (C - 1,): where nodes 1.. start
    cuts = np.unique(boundaries[(boundaries > 0) & (boundaries < cum[-1])])  # (k,)
    at = np.searchsorted(cum, cuts)  # (k,): index in ``cum`` of the first edge at or past each cut
    inside = cum[at] != cuts  # cuts that fall strictly inside run at - 1
    cuts, at = cuts[inside], at[inside]
    # The pieces, in the fixed order: each run, and one piece more after each cut inside it.
    pieces = np.insert(placed, at, placed[at - 1]) if len(cuts) else placed  # (R + k,): each piece's run
    # Where each node's pieces start: a boundary's place among the runs, plus the cuts before it.
    first_piece = np.searchsorted(cum, boundaries) + np.searchsorted(cuts, boundaries)  # (C - 1,)
    segments = np.concatenate([[0], first_piece, [len(pieces)]]).astype(np.int64)  # (C + 1,)
    # The pieces that are part of a run (next to a cut) are marked with ids past R while the node's
    # pieces are permuted: the permutation depends only on the segments, not on the values.
    partial, begin, end, owner_start = _pieces_next_to_cuts(cum, cuts, at)  # (m,) each
    del placed, cum  # a million-run group: 16 MB that planning need not hold any longer
    partial_runs = pieces[partial]  # (m,)
    pieces[partial] = num_runs + np.arange(len(partial), dtype=np.int64)
    shuffle_segments(pieces, segments, rng_for(seed, epoch, "node_shard_order", group))
    if not len(partial):
        return runs.pieces(pieces)
    moved = np.flatnonzero(pieces >= num_runs)  # (m,): where the partial pieces went
    which = pieces[moved] - num_runs  # (m,): which partial piece each one is
    pieces[moved] = partial_runs[which]
    return runs.pieces(pieces, moved, (begin - owner_start)[which], (end - begin)[which])


def _pieces_next_to_cuts(
    cum: np.ndarray, cuts: np.ndarray, at: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pieces that are part of a run, from the cuts inside runs alone (no array of R pieces).

    ``cum`` (R + 1,) are the placed runs' group positions, ``cuts`` (k,) ascending positions strictly
    inside runs, ``at`` (k,) the index in ``cum`` past each cut (its run is at - 1). Returns int64 (m,)
    each: the pieces' indices among all pieces (each run, and one more after each cut), their group
    positions [begin, end), and the group position where their run starts.
    """
    after_cut = at + np.arange(len(cuts), dtype=np.int64)  # (k,): the piece that starts at each cut
    same_run_as_previous = np.concatenate([[False], at[1:] == at[:-1]])  # (k,)
    same_run_as_next = np.concatenate([at[:-1] == at[1:], [False]])  # (k,)
    run_start, run_end = cum[at - 1], cum[at]  # (k,) each: the run each cut falls in
    before_begin = np.where(same_run_as_previous, np.roll(cuts, 1), run_start)  # (k,): the piece ending at cut
    after_end = np.where(same_run_as_next, np.roll(cuts, -1), run_end)  # (k,): the piece starting at cut
    # A piece between two cuts of one run is both the piece after one and the piece before the next.
    index = np.concatenate([after_cut - 1, after_cut])  # (2k,)
    partial, first = np.unique(index, return_index=True)  # (m,)
    begin = np.concatenate([before_begin, cuts])[first]
    end = np.concatenate([cuts, after_end])[first]
    owner_start = np.concatenate([run_start, run_start])[first]
    return partial, begin, end, owner_start


def slot_ranges(global_batch_size: int, num_canonical_nodes: int) -> np.ndarray:
    """Slot boundaries of canonical nodes: node c owns slots [edges[c], edges[c + 1]) of every batch.

    int64 (C + 1,) with edges[c] = floor(c * G / C).
    """
    return np.arange(num_canonical_nodes + 1, dtype=np.int64) * global_batch_size // num_canonical_nodes
