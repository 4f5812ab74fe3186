"""One (rank, worker)'s batches of an epoch, planned without the rest of the epoch.

``plan_epoch`` builds the whole (T, G) order, which every process then slices: 12 bytes a sample in
each process. Here a process walks only the canonical spans its columns draw from, a few rows at a
time (``span_reader``), and keeps only its own rows and columns: memory scales with its share.

The result is bit-for-bit ``partition.rank_worker_batches(plan_epoch(...), ...)``. Resuming with a
new global batch size, or at a position inside a batch, re-cuts the rest of the epoch across nodes'
columns; that rare path plans the whole epoch.
"""

from __future__ import annotations

from collections.abc import Sequence

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
from stream_plugin.order.shuffle import SpanKey
from stream_plugin.order.span_reader import PIECE_SAMPLES, SpanReader
from stream_plugin.order.topology import Topology


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
    G, T = config.global_batch_size, layout.slots.num_batches
    planned_B = config.device_batch_size if config.batching_method == "device_per_stream" else None
    B = checked_device_batch_size(planned_B, global_batch_size, topology)
    consumed = check_consumed_count(layout.num_samples, T, G, consumed)
    if needs_rechunk(config.batching_method, G, global_batch_size, consumed):
        order = plan_epoch(shape, chosen_per_stream, config, epoch)
        return rank_worker_batches(
            order,
            consumed=consumed,
            global_batch_size=global_batch_size,
            topology=topology,
            drop_last=drop_last,
        )
    pads = layout.slots.pad_per_node  # (C,)
    tail_size = G - int(pads.sum()) if pads.any() else 0
    full_batches = T - (1 if tail_size else 0)
    d, W, w = topology.data_parallel_rank, topology.num_workers, topology.worker
    rows = np.arange(consumed // G + w, full_batches, W, dtype=np.int64)  # (n_w,) this worker's rows
    has_last = bool(tail_size) and not drop_last and (full_batches - consumed // G) % W == w
    wanted_tail = (
        _wanted_tail(tail_size, topology.data_parallel_size, d) if has_last else np.zeros(0, np.int64)
    )
    walker = _NodeWalker(layout, config, int(epoch), piece_samples)
    full = np.empty((len(rows), B), dtype=np.int64)  # (n_w, B)
    tail = np.zeros(tail_size, dtype=np.int64)  # (r,): only the wanted entries are filled
    tail_offsets = np.concatenate([[0], np.cumsum(np.diff(layout.edges) - pads)])  # (C + 1,)
    for node in range(len(pads)):
        lo, hi = int(layout.edges[node]), int(layout.edges[node + 1])
        a, b = max(lo, d * B), min(hi, (d + 1) * B)  # this rank's columns inside the node's
        in_tail = (wanted_tail >= tail_offsets[node]) & (wanted_tail < tail_offsets[node + 1])
        if (a >= b or not len(rows)) and not in_tail.any():
            continue
        node_tail = walker.walk(
            node, rows if a < b else rows[:0], full, a - lo, b - lo, a - d * B, bool(in_tail.any())
        )
        if node_tail is not None:
            tail[int(tail_offsets[node]) : int(tail_offsets[node + 1])] = node_tail
    if not has_last:
        return RankBatches(full, tail[:0], 0)
    last, real = split_tail(tail, topology.data_parallel_size, d)
    return RankBatches(full, last, real)


def _wanted_tail(tail_size: int, data_parallel_size: int, rank: int) -> np.ndarray:
    """Positions in the partial batch that ``split_tail`` reads for ``rank``: int64 (k,)."""
    base, extra = divmod(tail_size, data_parallel_size)
    start = rank * base + min(rank, extra)
    real = base + (1 if rank < extra else 0)
    wanted = np.arange(start, start + real, dtype=np.int64)
    if extra and real == base:
        wanted = np.append(wanted, start if real else rank % tail_size)
    return wanted


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
        edges, slots = self._layout.edges, self._layout.slots
        lo, hi = int(edges[node]), int(edges[node + 1])
        width = hi - lo
        groups = None if slots.group_of_slot is None else slots.group_of_slot[:, lo:hi]  # (T, g_c)
        readers = self._readers(node)
        row = int(rows[0]) if len(rows) else slots.num_batches - 1
        self._skip_rows(readers, groups, width, 0, row)
        per_chunk = max(1, self._piece_samples // max(width, 1))
        done = 0  # rows of ``rows`` copied so far
        while done < len(rows):
            stop = min(row + per_chunk, int(rows[-1]) + 1)
            block = self._read_rows(readers, groups, width, row, stop)  # (stop - row, g_c)
            take = int(np.searchsorted(rows, stop))
            full[done:take, out_col : out_col + col_hi - col_lo] = block[rows[done:take] - row, col_lo:col_hi]
            done, row = take, stop
        if not want_tail:
            return None
        last_row = slots.num_batches - 1
        self._skip_rows(readers, groups, width, row, last_row)
        reader = readers[0]
        real = width - int(slots.pad_per_node[node])
        return reader.read(real).astype(np.int64) if reader is not None else np.zeros(0, np.int64)

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
