"""One (rank, worker)'s batches of an epoch, planned without the rest of the epoch.

``plan_epoch`` builds the whole (T, G) order, which every process then slices: 12 bytes a sample in
each process. Here a process walks only the canonical spans its columns draw from, a few rows at a
time (``span_reader``), and keeps only its own rows and columns: memory scales with its share.

The result is bit-for-bit ``partition.rank_worker_batches(plan_epoch(...), ...)``. Resuming with a
new global batch size, or at a position inside a batch, re-cuts the rest of the epoch across nodes'
columns; that rare path plans the whole epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from stream_plugin.order.layout import Chosen, DatasetShape
from stream_plugin.order.partition import (
    RankBatches,
    check_consumed_count,
    checked_device_batch_size,
    needs_rechunk,
    rank_worker_batches,
    split_tail,
)
from stream_plugin.order.plan import EpochLayout, OrderConfig, epoch_layout, plan_epoch
from stream_plugin.order.shuffle import SpanKey, is_positional
from stream_plugin.order.span_reader import PIECE_SAMPLES, SpanReader
from stream_plugin.order.topology import Topology

# Samples in the first piece of iter_rank_batches (what the first sample of a pass waits for), and
# at most in one piece (what a process holds of its pass at once, besides the pieces it still reads).
FIRST_PIECE_SAMPLES = 1 << 12
MOST_PIECE_SAMPLES = 1 << 20


def plan_rank_batches(
    shape: DatasetShape,
    chosen_per_stream: Sequence[Chosen],
    config: OrderConfig,
    epoch: int,
    *,
    consumed: int,
    global_batch_size: int,
    topology: Topology,
    drop_last: bool = False,
    piece_samples: int = PIECE_SAMPLES,
) -> RankBatches:
    """What ``topology``'s (rank, worker) yields from ``consumed`` on in ``epoch``: the same
    ``RankBatches`` as slicing ``plan_epoch``'s order, planning only the spans it reads."""
    layout = epoch_layout(shape, chosen_per_stream, config, epoch)
    share = _RankShare.of(layout, config, consumed, global_batch_size, topology, drop_last)
    if share is None:
        order = plan_epoch(shape, chosen_per_stream, config, epoch)
        return rank_worker_batches(
            order,
            consumed=consumed,
            global_batch_size=global_batch_size,
            topology=topology,
            drop_last=drop_last,
        )
    walker = _NodeWalker(layout, config, int(epoch), piece_samples)
    rows = share.rows(0, share.num_rows)  # (n_w,)
    full = np.empty((len(rows), share.B), dtype=np.int64)  # (n_w, B)
    tail = np.zeros(share.tail_size, dtype=np.int64)  # (r,): only the wanted entries are filled
    for node, a, b, want_tail in share.nodes():
        lo = int(layout.edges[node])
        d_B = topology.data_parallel_rank * share.B
        node_tail = walker.walk(node, rows if a < b else rows[:0], full, a - lo, b - lo, a - d_B, want_tail)
        if node_tail is not None:
            tail[int(share.tail_offsets[node]) : int(share.tail_offsets[node + 1])] = node_tail
    if not share.has_last:
        return RankBatches(full, tail[:0], 0)
    last, real = split_tail(tail, topology.data_parallel_size, topology.data_parallel_rank)
    return RankBatches(full, last, real)


def iter_rank_batches(
    shape: DatasetShape,
    chosen_per_stream: Sequence[Chosen],
    config: OrderConfig,
    epoch: int,
    *,
    consumed: int,
    global_batch_size: int,
    topology: Topology,
    drop_last: bool = False,
    piece_samples: int = PIECE_SAMPLES,
    first_samples: int = FIRST_PIECE_SAMPLES,
    shard_ids: bool = False,
) -> Iterator[np.ndarray]:
    """``plan_rank_batches(...).flat()`` in pieces, in order, each planned only when asked for.

    The first piece holds about ``first_samples`` samples and each next one four times more (up to
    ``MOST_PIECE_SAMPLES``), so the first sample of a long pass waits for a few thousand samples' planning,
    not the whole pass's. Checks (``consumed``, batch sizes) run before the first piece is asked for.

    ``shard_ids``: each read's shard id instead of its sample id, from spans of shard ids shuffled alike
    (``EpochLayout.as_shard_ids``); only for a shuffle that moves samples by position alone
    (``shuffle.is_positional``), a ValueError otherwise.
    """
    if shard_ids and not is_positional(config.algorithm):
        raise ValueError(
            f"shard_ids: expected a built-in shuffle, found {config.algorithm!r}, which may move samples by "
            "their values; plan the sample ids and look their shards up instead"
        )
    layout = epoch_layout(shape, chosen_per_stream, config, epoch)
    share = _RankShare.of(layout, config, consumed, global_batch_size, topology, drop_last)
    if share is None:  # re-cut batches: the rare path plans the whole epoch anyway
        ids = plan_rank_batches(
            shape,
            chosen_per_stream,
            config,
            epoch,
            consumed=consumed,
            global_batch_size=global_batch_size,
            topology=topology,
            drop_last=drop_last,
            piece_samples=piece_samples,
        ).flat()
        if shard_ids:  # its ids mapped to their shards
            ids = np.searchsorted(shape.shard_offsets, ids, side="right") - 1
        return iter([ids])
    if shard_ids:
        layout = layout.as_shard_ids()
    return _pieces(layout, config, int(epoch), share, topology, piece_samples, first_samples)


def _pieces(
    layout: EpochLayout,
    config: OrderConfig,
    epoch: int,
    share: _RankShare,
    topology: Topology,
    piece_samples: int,
    first_samples: int,
) -> Iterator[np.ndarray]:
    B = share.B
    bounds = _piece_bounds(share.num_rows, B, first_samples).tolist()  # (num_pieces + 1,)
    walker = _NodeWalker(layout, config, epoch, piece_samples)
    d_B = topology.data_parallel_rank * B
    first_row = share.first_row if share.num_rows else None
    walks = []  # every node's walk starts here, in node order, as plan_rank_batches's do
    for node, a, b, want_tail in share.nodes():
        lo = int(layout.edges[node])
        reads_rows = a < b
        pieces = (share.rows(begin, end) for begin, end in zip(bounds[:-1], bounds[1:])) if reads_rows else iter([])
        walk = walker.walk_pieces(
            node, first_row if reads_rows else None, pieces, a - lo, b - lo, want_tail
        )
        walks.append((a - d_B, b - d_B, walk))
    whole = [walk for out_lo, out_hi, walk in walks if (out_lo, out_hi) == (0, B)]  # one node gives every column
    for begin, end in zip(bounds[:-1], bounds[1:]):
        if whole:
            yield next(whole[0]).reshape(-1)  # (k * B,): the walk's own fresh rows, not copied again
            continue
        piece = np.empty((end - begin, B), dtype=np.int64)  # (k, B)
        for out_lo, out_hi, walk in walks:
            if out_lo < out_hi:
                piece[:, out_lo:out_hi] = next(walk)
        yield piece.reshape(-1)
    if not share.has_last:
        return
    tail = np.zeros(share.tail_size, dtype=np.int64)  # (r,): only the wanted entries are filled
    for (node, _, _, want_tail), (_, _, walk) in zip(share.nodes(), walks, strict=True):
        if want_tail:
            tail[int(share.tail_offsets[node]) : int(share.tail_offsets[node + 1])] = next(walk)
    last, real = split_tail(tail, topology.data_parallel_size, topology.data_parallel_rank)
    yield last


def _piece_bounds(num_rows: int, B: int, first_samples: int) -> np.ndarray:
    """Where each piece of ``iter_rank_batches`` starts in this worker's rows: int64 (num_pieces + 1,),
    growing fourfold from about ``first_samples`` samples to about ``MOST_PIECE_SAMPLES``."""
    bounds = [0]
    rows = max(1, first_samples // max(B, 1))
    most = max(1, MOST_PIECE_SAMPLES // max(B, 1))
    while bounds[-1] < num_rows:
        bounds.append(min(num_rows, bounds[-1] + rows))
        rows = min(most, rows * 4)
    return np.array(bounds, dtype=np.int64)


@dataclass(frozen=True)
class _RankShare:
    """What a (rank, worker) takes of an epoch's layout: its rows, and the nodes its columns lie in."""

    layout: EpochLayout
    B: int
    first_row: int  # this worker's whole batches are rows first_row, first_row + row_step, ...
    row_step: int
    num_rows: int
    has_last: bool
    wanted_tail: np.ndarray  # int64 (k,): positions of the partial batch this rank reads
    tail_size: int
    tail_offsets: np.ndarray  # int64 (C + 1,): where each node's samples start in the partial batch
    rank: int

    @classmethod
    def of(
        cls,
        layout: EpochLayout,
        config: OrderConfig,
        consumed: int,
        global_batch_size: int,
        topology: Topology,
        drop_last: bool,
    ) -> _RankShare | None:
        """The share; None when the rest of the epoch must be cut into new batches (``needs_rechunk``)."""
        G, T = config.global_batch_size, layout.slots.num_batches
        planned_B = config.device_batch_size if config.batching_method == "device_per_stream" else None
        B = checked_device_batch_size(planned_B, global_batch_size, topology)
        consumed = check_consumed_count(layout.num_samples, T, G, consumed)
        if needs_rechunk(config.batching_method, G, global_batch_size, consumed):
            return None
        pads = layout.slots.pad_per_node  # (C,)
        tail_size = G - int(pads.sum()) if pads.any() else 0
        full_batches = T - (1 if tail_size else 0)
        d, W, w = topology.data_parallel_rank, topology.num_workers, topology.worker
        first_row = consumed // G + w
        num_rows = len(range(first_row, full_batches, W))
        has_last = bool(tail_size) and not drop_last and (full_batches - consumed // G) % W == w
        wanted_tail = (
            _wanted_tail(tail_size, topology.data_parallel_size, d) if has_last else np.zeros(0, np.int64)
        )
        tail_offsets = np.concatenate([[0], np.cumsum(np.diff(layout.edges) - pads)])  # (C + 1,)
        return cls(layout, B, first_row, W, num_rows, has_last, wanted_tail, tail_size, tail_offsets, d)

    def rows(self, begin: int, end: int) -> np.ndarray:
        """This worker's rows ``begin`` to ``end`` (counted among its own): int64 (end - begin,)."""
        start = self.first_row + begin * self.row_step
        return np.arange(start, start + (end - begin) * self.row_step, self.row_step, dtype=np.int64)

    def nodes(self) -> Iterator[tuple[int, int, int, bool]]:
        """``(node, a, b, want_tail)`` for each node to walk: [a, b) are this rank's columns inside the
        node's (as columns of the global batch), ``want_tail`` whether it reads the node's partial row."""
        edges, B, d = self.layout.edges, self.B, self.rank
        for node in range(len(edges) - 1):
            lo, hi = int(edges[node]), int(edges[node + 1])
            a, b = max(lo, d * B), min(hi, (d + 1) * B)
            in_tail = (self.wanted_tail >= self.tail_offsets[node]) & (self.wanted_tail < self.tail_offsets[node + 1])
            want_tail = bool(in_tail.any())
            if (a >= b or not self.num_rows) and not want_tail:
                continue
            yield node, a, b, want_tail


def _wanted_tail(tail_size: int, data_parallel_size: int, rank: int) -> np.ndarray:
    """Positions in the partial batch that ``split_tail`` reads for ``rank``: int64 (k,)."""
    base, extra = divmod(tail_size, data_parallel_size)
    start = rank * base + min(rank, extra)
    real = base + (1 if rank < extra else 0)
    wanted = np.arange(start, start + real, dtype=np.int64)
    if extra and real == base:
        wanted = np.append(wanted, start if real else rank % tail_size)
    return wanted


def _next_rows(piece: np.ndarray, row: int, per_chunk: int) -> bool:
    """Whether rows ``piece`` (ascending) are the next ``len(piece)`` rows from ``row``, one chunk's worth."""
    return 0 < len(piece) <= per_chunk and int(piece[0]) == row and int(piece[-1]) - row == len(piece) - 1


class _NodeWalker:
    """Reads one canonical node's (T, g_c) block row by row, from its groups' span readers."""

    def __init__(self, layout: EpochLayout, config: OrderConfig, epoch: int, piece_samples: int) -> None:
        self._layout, self._config, self._epoch = layout, config, epoch
        self._piece_samples = piece_samples
        # Where node c's span of group g begins in the group: int64 (C, num_groups).
        lengths = layout.slots.span_lengths
        self._span_begin = np.cumsum(lengths, axis=0) - lengths

    def _readers(self, node: int) -> list[SpanReader | None]:
        config, layout = self._config, self._layout
        readers: list[SpanReader | None] = []
        for group, runs in enumerate(layout.runs_per_group):
            begin = int(self._span_begin[node, group])
            length = int(layout.slots.span_lengths[node, group])
            key = SpanKey(config.shuffle_seed, self._epoch, (group, node), config.block_size)
            reader = SpanReader(
                runs,
                begin,
                begin + length,
                key,
                config.algorithm,
                layout.dtype,
                piece_samples=self._piece_samples,
            )
            readers.append(reader if length else None)
        return readers

    def walk(
        self,
        node: int,
        rows: np.ndarray,
        full: np.ndarray,
        col_lo: int,
        col_hi: int,
        out_col: int,
        want_tail: bool,
    ) -> np.ndarray | None:
        """Copy columns [col_lo, col_hi) of the node's block at ``rows`` (ascending, whole rows only) into
        ``full[:, out_col:]``; return the node's samples of the partial last row when ``want_tail``."""
        target = full[:, out_col : out_col + col_hi - col_lo]  # (n_w, col_hi - col_lo)
        first_row = int(rows[0]) if len(rows) else None
        pieces = self.walk_pieces(node, first_row, iter([rows]), col_lo, col_hi, want_tail, out=target)
        next(pieces)  # the one piece: all of ``rows``, written into ``full``
        return next(pieces) if want_tail else None

    def walk_pieces(
        self,
        node: int,
        first_row: int | None,
        pieces: Iterator[np.ndarray],
        col_lo: int,
        col_hi: int,
        want_tail: bool,
        *,
        out: np.ndarray | None = None,
    ) -> Iterator[np.ndarray]:
        """As ``walk``, a piece at a time: for each piece of rows (ascending, each after the one before,
        the first starting at ``first_row``; None: no rows), yield columns [col_lo, col_hi) of the node's
        block at those rows (into ``out``, piece after piece, when given), then, when ``want_tail``, the
        node's samples of the partial last row."""
        edges, slots = self._layout.edges, self._layout.slots
        lo, hi = int(edges[node]), int(edges[node + 1])
        width = hi - lo
        groups = None if slots.group_of_slot is None else slots.group_of_slot[:, lo:hi]  # (T, g_c)
        readers = self._readers(node)
        row = slots.num_batches - 1 if first_row is None else first_row
        self._skip_rows(readers, groups, width, 0, row)
        per_chunk = max(1, self._piece_samples // max(width, 1))
        written = 0  # rows of ``out`` written so far
        for piece in pieces:  # (k,) ascending
            # The node's next rows, every column, already int64: the rows read are the piece, not copied.
            whole_rows = (col_lo, col_hi) == (0, width) and self._layout.dtype == np.int64
            if out is None and whole_rows and _next_rows(piece, row, per_chunk):
                row = int(piece[-1]) + 1
                yield self._read_rows(readers, groups, width, int(piece[0]), row)  # fresh (k, width)
                continue
            if out is not None:
                target = out[written : written + len(piece)]
                written += len(piece)
            else:
                target = np.empty((len(piece), col_hi - col_lo), dtype=np.int64)  # (k, col_hi - col_lo)
            done = 0  # rows of ``piece`` copied so far
            while done < len(piece):
                stop = min(row + per_chunk, int(piece[-1]) + 1)
                block = self._read_rows(readers, groups, width, row, stop)  # (stop - row, g_c)
                take = int(np.searchsorted(piece, stop))
                target[done:take] = block[piece[done:take] - row, col_lo:col_hi]
                done, row = take, stop
            yield target
        if not want_tail:
            return
        last_row = slots.num_batches - 1
        self._skip_rows(readers, groups, width, row, last_row)
        reader = readers[0]
        real = width - int(slots.pad_per_node[node])
        yield reader.read(real).astype(np.int64) if reader is not None else np.zeros(0, np.int64)

    def _skip_rows(
        self, readers: list[SpanReader | None], groups: np.ndarray | None, width: int, start: int, stop: int
    ) -> None:
        if stop <= start:
            return
        if groups is None:
            if readers[0] is not None:
                readers[0].skip((stop - start) * width)
            return
        counts = np.bincount(groups[start:stop].reshape(-1), minlength=len(readers))  # (num_groups,)
        for reader, count in zip(readers, counts.tolist(), strict=True):
            if count:
                assert reader is not None
                reader.skip(count)

    def _read_rows(
        self, readers: list[SpanReader | None], groups: np.ndarray | None, width: int, start: int, stop: int
    ) -> np.ndarray:
        if groups is None:
            assert readers[0] is not None
            return readers[0].read((stop - start) * width).reshape(stop - start, width)
        sub = groups[start:stop]  # (k, g_c)
        block = np.empty(sub.shape, dtype=self._layout.dtype)
        for group, reader in enumerate(readers):
            mask = sub == group
            count = int(mask.sum())
            if count:
                assert reader is not None
                block[mask] = reader.read(count)
        return block
