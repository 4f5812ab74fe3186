"""Batching methods: which group (stream) fills each slot of each global batch, and which slots stay empty.

The result is a ``SlotPlan``: the number of global batches T, the groups whose spans are cut, and
for every (canonical node, group) the number of samples the node reads from that group. The spans in
``layout`` are cut with exactly these lengths, so no canonical node runs dry early.

No method repeats a sample. Repeats that keep data-parallel ranks in step are added when one rank's
share is sliced (``partition``), and are not part of the order.

Methods
-------
``random``
    One group, all streams mixed; proportions hold in expectation. All chosen samples are used: the
    last global batch holds the ``N mod G`` left over, and its ``T * G - N < G`` empty slots sit at the
    tail of each canonical node's share of it (spread in proportion to the node's slot count).
``stratified``
    One group per stream. Every global batch holds the same fixed number of samples of each stream
    (MosaicML's portions: ``floor(G * share)`` plus the largest remainders), and only whole batches are
    kept: T is the smallest ``n_s // portion_s``. A stream with no slot, or too few samples for one
    batch, is a ``ConfigError`` (a ``ValueError``, as MosaicML raises).
``per_stream``
    Every global batch comes from one stream; each stream gives ``n_s // G`` whole batches (MosaicML's
    count: the rest of a stream is not used this epoch). The sequence of batch streams is shuffled per
    epoch when ``shuffle`` is on, and the same every epoch when it is off.
``device_per_stream``
    Every device batch (B = device_batch_size samples) comes from one stream; each stream gives
    ``n_s // B`` whole device batches, in a shuffled sequence (per epoch when ``shuffle`` is on, fixed
    when off), and global batches are G / B consecutive ones (a final incomplete group is not used).
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


@dataclass(frozen=True, eq=False)
class SlotPlan:
    """Which group fills each slot; what each canonical node reads from each group."""

    num_batches: int
    groups: tuple[tuple[int, ...], ...]  # the streams of each group
    span_lengths: np.ndarray  # int64 (C, num_groups): real samples node c reads from group g
    # int16 (T, G) group of each slot; None for one group (``random``, the only method that leaves
    # slots empty: ``pad_per_node`` of them).
    group_of_slot: np.ndarray | None
    pad_per_node: np.ndarray  # int64 (C,): empty slots at the tail of each node's last-batch share (one group)


def node_tail_pad_counts(pads: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Spread ``pads[k] < G`` empty slots over canonical nodes in proportion to their slot counts.

    int64 (k, C). Cumulative rounding: node c gets ``floor(p * edges[c+1] / G) - floor(p * edges[c] / G)``
    which never exceeds its slot count because ``p < G``.
    """
    total = edges[-1]
    cumulative = pads[:, None] * edges[None, :] // total  # (k, C + 1)
    return np.diff(cumulative, axis=1)


def stratified_portions(stream_sizes: np.ndarray, global_batch_size: int) -> np.ndarray:
    """Samples of each stream in every global batch: int64 (S,), summing to G (MosaicML's rule).

    Stream s gets ``floor(G * share_s)``; the ``G - sum`` missing slots go to the streams with the
    largest remainders (ties: the higher stream id, as MosaicML's reversed argsort picks them).
    """
    sizes = np.asarray(stream_sizes, dtype=np.int64)
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(len(sizes), dtype=np.int64)
    base = global_batch_size * sizes // total  # (S,)
    remainder = global_batch_size * sizes % total  # (S,) share fraction, scaled by N
    missing = global_batch_size - int(base.sum())
    # Largest remainder first; among equal remainders the higher stream id first.
    ranked = np.lexsort((-np.arange(len(sizes)), -remainder))[:missing]
    base[ranked] += 1
    return base


def check_stratified_portions(portions: np.ndarray, stream_sizes: np.ndarray, global_batch_size: int) -> None:
    """MosaicML's refusal: every stream needs at least one sample in every global batch, and enough
    samples for one batch."""
    for stream, (portion, size) in enumerate(zip(portions.tolist(), np.asarray(stream_sizes).tolist())):
        if portion <= 0 or size < portion:
            raise ConfigError(
                f"stream {stream}: expected at least one sample in each global batch of {global_batch_size} "
                f"and {max(portion, 1)} samples for one batch under batching_method='stratified', found a "
                f"share of {portion} slots and {size} samples in the epoch (Number of samples for stream {stream} "
                f"in a global batch is {portion}, too low); increase the global batch size, "
                f"or the proportion (or repeat) of stream {stream}"
            )


def epoch_batches(
    stream_sizes: np.ndarray, *, method: str, global_batch_size: int, device_batch_size: int | None
) -> tuple[int, int]:
    """``(full global batches, samples in the final partial batch)`` of an epoch, without planning it.

    Only ``random`` keeps a partial final batch; the other methods keep whole batches, as MosaicML does.
    """
    sizes = np.asarray(stream_sizes, dtype=np.int64)
    G = global_batch_size
    if method == "random":
        full, tail = divmod(int(sizes.sum()), G)
        return full, tail
    if method == "stratified":
        portions = stratified_portions(sizes, G)
        check_stratified_portions(portions, sizes, G)
        return int((sizes // portions).min()), 0
    if method == "per_stream":
        return int((sizes // G).sum()), 0
    if method == "device_per_stream":
        if device_batch_size is None:
            raise ConfigError(
                "device_batch_size: expected the per-device batch size for batching_method="
                "'device_per_stream', found None; pass batch_size (per device)"
            )
        return int((sizes // device_batch_size).sum()) // (G // device_batch_size), 0
    raise ConfigError(
        f"batching_method: expected one of {list(BATCHING_METHODS)}, found {method!r}; pick one of them"
    )


def _span_lengths(group_of_slot: np.ndarray, edges: np.ndarray, num_groups: int) -> np.ndarray:
    """int64 (C, num_groups): slots of each group inside each canonical node's column range."""
    lengths = np.zeros((len(edges) - 1, num_groups), dtype=np.int64)
    for node, (lo, hi) in enumerate(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True)):
        groups = group_of_slot[:, lo:hi].reshape(-1)  # (slots of node,)
        lengths[node] = np.bincount(groups, minlength=num_groups)
    return lengths


def _plan_random(total: int, num_streams: int, G: int, edges: np.ndarray) -> SlotPlan:
    num_batches = -(-total // G)
    empty = num_batches * G - total
    empty_per_node = node_tail_pad_counts(np.array([empty]), edges)[0]  # (C,)
    span_lengths = (num_batches * np.diff(edges) - empty_per_node)[:, None]  # (C, 1)
    return SlotPlan(num_batches, (tuple(range(num_streams)),), span_lengths, None, empty_per_node)


def _plan_stratified(
    sizes: np.ndarray, G: int, edges: np.ndarray, shuffle: bool, seed: int, epoch: int
) -> SlotPlan:
    portions = stratified_portions(sizes, G)  # (S,)
    check_stratified_portions(portions, sizes, G)
    num_batches = int((sizes // portions).min())
    num_streams = len(sizes)
    row = np.repeat(np.arange(num_streams, dtype=np.int16), portions)  # (G,) stream of each slot
    group_of_slot = np.tile(row, (num_batches, 1))  # (T, G)
    if shuffle:
        # Streams at random slots of each batch, so every rank sees the mix; the counts stay fixed.
        group_of_slot = rng_for(seed, epoch, "stratified_slots").permuted(group_of_slot, axis=1)
    groups = tuple((s,) for s in range(num_streams))
    lengths = _span_lengths(group_of_slot, edges, num_streams)
    return SlotPlan(num_batches, groups, lengths, group_of_slot, np.zeros(len(edges) - 1, np.int64))


def _sequence_key(shuffle: bool, epoch: int) -> int:
    """The epoch that keys a batch-stream sequence: a fixed one when shuffling is off, so every epoch
    draws its batches from the streams in the same order."""
    return epoch if shuffle else 0


def _plan_per_stream(
    sizes: np.ndarray, G: int, edges: np.ndarray, shuffle: bool, seed: int, epoch: int
) -> SlotPlan:
    batches_per_stream = sizes // G  # (S,) whole global batches only, as MosaicML
    num_streams = len(sizes)
    stream_of_batch = np.repeat(np.arange(num_streams), batches_per_stream)  # (T,)
    rng = rng_for(seed, _sequence_key(shuffle, epoch), "per_stream_batches")
    stream_of_batch = rng.permutation(stream_of_batch)
    num_batches = len(stream_of_batch)
    group_of_slot = np.repeat(stream_of_batch.astype(np.int16)[:, None], G, axis=1)  # (T, G)
    groups = tuple((s,) for s in range(num_streams))
    lengths = _span_lengths(group_of_slot, edges, num_streams)
    return SlotPlan(num_batches, groups, lengths, group_of_slot, np.zeros(len(edges) - 1, np.int64))


def _plan_device_per_stream(
    sizes: np.ndarray, G: int, B: int, edges: np.ndarray, shuffle: bool, seed: int, epoch: int
) -> SlotPlan:
    units_per_stream = sizes // B  # whole device batches per stream (S,)
    num_streams = len(sizes)
    stream_of_unit = np.repeat(np.arange(num_streams), units_per_stream)
    rng = rng_for(seed, _sequence_key(shuffle, epoch), "device_per_stream_batches")
    stream_of_unit = rng.permutation(stream_of_unit)
    units_per_batch = G // B
    num_batches = len(stream_of_unit) // units_per_batch
    # Whole global batches only: the last units that do not fill one are not part of the epoch.
    stream_of_unit = stream_of_unit[: num_batches * units_per_batch]
    group_of_slot = np.repeat(stream_of_unit.astype(np.int16), B).reshape(num_batches, G)  # (T, G)
    groups = tuple((s,) for s in range(num_streams))
    lengths = _span_lengths(group_of_slot, edges, num_streams)
    return SlotPlan(num_batches, groups, lengths, group_of_slot, np.zeros(len(edges) - 1, np.int64))


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
        return _plan_per_stream(sizes, global_batch_size, edges, shuffle, seed, epoch)
    if method == "device_per_stream":
        if device_batch_size is None:
            raise ConfigError(
                "device_batch_size: expected the per-device batch size for batching_method="
                "'device_per_stream', found None; pass batch_size (per device)"
            )
        return _plan_device_per_stream(
            sizes, global_batch_size, device_batch_size, edges, shuffle, seed, epoch
        )
    raise ConfigError(
        f"batching_method: expected one of {list(BATCHING_METHODS)}, found {method!r}; pick one of them"
    )
