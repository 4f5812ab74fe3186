"""Batching methods: which group (stream) fills each slot of each global batch, and where padding goes.

The result is a ``SlotPlan``: the number of global batches T, the groups whose spans are cut, and
for every (canonical node, group) the number of real samples the node reads from that group. The
spans in ``layout`` are cut with exactly these lengths, so no canonical node runs dry early.

Methods
-------
``random``
    One group, all streams mixed; proportions hold in expectation. Padding: ``T * G - N < G`` slots
    at the tail of each canonical node's share of the last batch (spread in proportion to the
    node's slot count).
``stratified``
    One group per stream. Every full global batch holds ``floor`` or ``ceil`` of ``G * share`` samples
    of each stream, and the cumulative count of each stream after any batch is within one sample of
    its exact share. The last, partial batch takes what is left and is padded like ``random``.
``per_stream``
    Every global batch comes from one stream; the sequence of batch streams is shuffled. Each
    stream's last batch is padded with samples of the same stream, so padding is below G per stream.
``device_per_stream``
    Every device batch (B = device_batch_size samples) comes from one stream; global batches are
    G / B consecutive device batches of a shuffled sequence. Each stream's last device batch is
    padded from the same stream, and whole padding device batches complete the last global batch.
    The order depends on B, so it cannot be resumed on another data-parallel size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from stream_plugin.errors import ConfigError
from stream_plugin.order.layout import slot_ranges
from stream_plugin.order.random import rng_for

BatchingMethod = Literal["random", "stratified", "per_stream", "device_per_stream"]
BATCHING_METHODS: tuple[str, ...] = get_args(BatchingMethod)

NO_GROUP = -1  # group_of_slot value of a padding slot that may copy any group (stratified)


@dataclass(frozen=True, eq=False)
class SlotPlan:
    """Which group fills each slot; what each canonical node reads from each group."""

    num_batches: int
    groups: tuple[tuple[int, ...], ...]  # the streams of each group
    span_lengths: np.ndarray  # int64 (C, num_groups): real samples node c reads from group g
    # int16 (T, G) group of each slot (padding slots: the group they copy, or NO_GROUP) and
    # bool (T, G) padding mask. Both None for one group whose padding is ``pad_per_node``.
    group_of_slot: np.ndarray | None
    is_pad: np.ndarray | None
    pad_per_node: np.ndarray  # int64 (C,): tail padding of each node's last-batch share (one group)


def node_tail_pad_counts(pads: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Spread ``pads[k] < G`` padding slots over canonical nodes in proportion to their slot counts.

    int64 (k, C). Cumulative rounding: node c gets ``floor(p * edges[c+1] / G) - floor(p * edges[c] / G)``
    which never exceeds its slot count because ``p < G``.
    """
    total = edges[-1]
    cumulative = pads[:, None] * edges[None, :] // total  # (k, C + 1)
    return np.diff(cumulative, axis=1)


def node_tail_pad_mask(pads: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """bool (k, G): True on the last ``pad_c`` slots of each canonical node's range, per row."""
    per_node = node_tail_pad_counts(pads, edges)  # (k, C)
    node_of_slot = np.repeat(np.arange(len(edges) - 1), np.diff(edges))  # (G,)
    first_pad = edges[1:][None, :] - per_node  # (k, C): first padding slot of each node
    return np.arange(edges[-1])[None, :] >= first_pad[:, node_of_slot]  # (k, G)


def stratified_counts(stream_sizes: np.ndarray, global_batch_size: int) -> np.ndarray:
    """Per-batch sample counts of each stream: int64 (T, S); full rows sum to G, the last row to the rest.

    Stream s gets ``b_s = floor(G * share_s)`` per batch plus at most one extra; the ``R = G - sum(b)``
    extras of a batch go to the streams furthest behind their exact cumulative share (ties: lowest
    stream id). This keeps every stream within one sample of its share after every batch.
    """
    sizes = [int(size) for size in stream_sizes]
    total, num_streams = sum(sizes), len(sizes)
    full_rows, rest = divmod(total, global_batch_size)
    if total == 0:
        return np.zeros((0, num_streams), dtype=np.int64)
    base = [global_batch_size * size // total for size in sizes]
    frac = [global_batch_size * size % total for size in sizes]  # share fraction, scaled by N
    extras_per_row = global_batch_size - sum(base)
    taken = [0] * num_streams
    counts = np.tile(np.asarray(base, dtype=np.int64), (full_rows, 1))  # (T_full, S)
    if extras_per_row:
        streams = range(num_streams)
        for row in range(full_rows):
            # Deficit (scaled by N) of each stream after this row if it got no extra.
            deficit = [(row + 1) * frac[s] - total * taken[s] for s in streams]
            for s in sorted(streams, key=lambda s: (-deficit[s], s))[:extras_per_row]:
                taken[s] += 1
                counts[row, s] += 1
    if rest:
        last = np.asarray(sizes, dtype=np.int64) - counts.sum(axis=0)  # (S,)
        assert last.min() >= 0 and last.sum() == rest
        counts = np.vstack([counts, last[None, :]])
    return counts


def _last_occurrence(values: np.ndarray, num_values: int) -> np.ndarray:
    """int64 (num_values,): index of the last occurrence of each value in ``values`` (-1 if absent)."""
    last = np.full(num_values, -1, dtype=np.int64)
    present, first_from_end = np.unique(values[::-1], return_index=True)
    last[present] = len(values) - 1 - first_from_end
    return last


def _span_lengths(
    group_of_slot: np.ndarray, is_pad: np.ndarray, edges: np.ndarray, num_groups: int
) -> np.ndarray:
    """int64 (C, num_groups): real slots of each group inside each canonical node's column range."""
    lengths = np.zeros((len(edges) - 1, num_groups), dtype=np.int64)
    for node, (lo, hi) in enumerate(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True)):
        groups = group_of_slot[:, lo:hi][~is_pad[:, lo:hi]]  # (real slots of node,)
        lengths[node] = np.bincount(groups, minlength=num_groups)
    return lengths


def _plan_random(total: int, num_streams: int, G: int, edges: np.ndarray) -> SlotPlan:
    num_batches = -(-total // G)
    pad = num_batches * G - total
    pad_per_node = node_tail_pad_counts(np.array([pad]), edges)[0]  # (C,)
    span_lengths = (num_batches * np.diff(edges) - pad_per_node)[:, None]  # (C, 1)
    return SlotPlan(num_batches, (tuple(range(num_streams)),), span_lengths, None, None, pad_per_node)


def _plan_stratified(
    sizes: np.ndarray, G: int, edges: np.ndarray, shuffle: bool, seed: int, epoch: int
) -> SlotPlan:
    counts = stratified_counts(sizes, G)  # (T, S)
    num_batches, num_streams = counts.shape
    labels = np.repeat(np.tile(np.arange(num_streams, dtype=np.int16), num_batches), counts.ravel())  # (N,)
    full_rows = int(labels.size // G)
    group_of_slot = np.full((num_batches, G), NO_GROUP, dtype=np.int16)
    group_of_slot[:full_rows] = labels[: full_rows * G].reshape(full_rows, G)
    is_pad = np.zeros((num_batches, G), dtype=bool)
    if full_rows < num_batches:  # a partial last batch: pad node tails like ``random``
        is_pad[-1] = node_tail_pad_mask(np.array([num_batches * G - labels.size]), edges)[0]
        group_of_slot[-1, ~is_pad[-1]] = labels[full_rows * G :]
    if shuffle:
        # Streams at random slots of each batch, so every rank sees the mix; the counts stay exact.
        rng = rng_for(seed, epoch, "stratified_slots")
        group_of_slot[:full_rows] = rng.permuted(group_of_slot[:full_rows], axis=1)
        if full_rows < num_batches:
            real = ~is_pad[-1]
            group_of_slot[-1, real] = rng.permutation(group_of_slot[-1, real])
    groups = tuple((s,) for s in range(num_streams))
    lengths = _span_lengths(group_of_slot, is_pad, edges, num_streams)
    return SlotPlan(num_batches, groups, lengths, group_of_slot, is_pad, np.zeros(len(edges) - 1, np.int64))


def _plan_per_stream(sizes: np.ndarray, G: int, edges: np.ndarray, seed: int, epoch: int) -> SlotPlan:
    batches_per_stream = -(-sizes // G)  # (S,)
    num_streams = len(sizes)
    stream_of_batch = np.repeat(np.arange(num_streams), batches_per_stream)  # (T,)
    stream_of_batch = rng_for(seed, epoch, "per_stream_batches").permutation(stream_of_batch)
    num_batches = len(stream_of_batch)
    # Each stream's padding goes into its last batch in the shuffled sequence.
    has_batches = batches_per_stream > 0
    pad_rows = _last_occurrence(stream_of_batch, num_streams)[has_batches]  # (k,)
    pads = (batches_per_stream * G - sizes)[has_batches]  # (k,)
    is_pad = np.zeros((num_batches, G), dtype=bool)
    is_pad[pad_rows] = node_tail_pad_mask(pads, edges)
    group_of_slot = np.repeat(stream_of_batch.astype(np.int16)[:, None], G, axis=1)  # (T, G)
    groups = tuple((s,) for s in range(num_streams))
    lengths = _span_lengths(group_of_slot, is_pad, edges, num_streams)
    return SlotPlan(num_batches, groups, lengths, group_of_slot, is_pad, np.zeros(len(edges) - 1, np.int64))


def _plan_device_per_stream(
    sizes: np.ndarray, G: int, B: int, edges: np.ndarray, seed: int, epoch: int
) -> SlotPlan:
    units_per_stream = -(-sizes // B)  # device batches per stream (S,)
    num_streams = len(sizes)
    stream_of_unit = np.repeat(np.arange(num_streams), units_per_stream)
    stream_of_unit = rng_for(seed, epoch, "device_per_stream_batches").permutation(stream_of_unit)
    num_units = len(stream_of_unit)
    units_per_batch = G // B
    num_batches = -(-num_units // units_per_batch)
    pad_of_unit = np.zeros(num_batches * units_per_batch, dtype=np.int64)  # (T * G / B,)
    has_units = units_per_stream > 0
    pad_of_unit[_last_occurrence(stream_of_unit, num_streams)[has_units]] = (units_per_stream * B - sizes)[
        has_units
    ]
    # Whole padding device batches complete the last global batch; they copy the last real unit's stream.
    pad_of_unit[num_units:] = B
    filler = stream_of_unit[-1] if num_units else 0
    stream_of_unit = np.concatenate([stream_of_unit, np.full(len(pad_of_unit) - num_units, filler)])
    in_unit = np.arange(B)[None, :]  # (1, B)
    is_pad = (in_unit >= B - pad_of_unit[:, None]).reshape(num_batches, G)  # (T, G)
    group_of_slot = np.repeat(stream_of_unit.astype(np.int16), B).reshape(num_batches, G)  # (T, G)
    groups = tuple((s,) for s in range(num_streams))
    lengths = _span_lengths(group_of_slot, is_pad, edges, num_streams)
    return SlotPlan(num_batches, groups, lengths, group_of_slot, is_pad, np.zeros(len(edges) - 1, np.int64))


def plan_slots(
    stream_sizes: np.ndarray,
    *,
    method: BatchingMethod,
    global_batch_size: int,
    num_canonical_nodes: int,
    device_batch_size: int | None,
    shuffle: bool,
    seed: int,
    epoch: int,
) -> SlotPlan:
    """The slot plan of one epoch for ``stream_sizes`` (int64 (S,): chosen samples per stream)."""
    sizes = np.asarray(stream_sizes, dtype=np.int64)
    edges = slot_ranges(global_batch_size, num_canonical_nodes)  # (C + 1,)
    if method == "random":
        return _plan_random(int(sizes.sum()), len(sizes), global_batch_size, edges)
    if method == "stratified":
        return _plan_stratified(sizes, global_batch_size, edges, shuffle, seed, epoch)
    if method == "per_stream":
        return _plan_per_stream(sizes, global_batch_size, edges, seed, epoch)
    if method == "device_per_stream":
        if device_batch_size is None:
            raise ConfigError(
                "device_batch_size: expected the per-device batch size for batching_method="
                "'device_per_stream', found None; pass batch_size (per device)"
            )
        return _plan_device_per_stream(sizes, global_batch_size, device_batch_size, edges, seed, epoch)
    raise ConfigError(
        f"batching_method: expected one of {list(BATCHING_METHODS)}, found {method!r}; pick one of them"
    )
