"""Slice an epoch's global batches for one (rank, DataLoader worker), from any resume point.

Data-parallel rank d reads slots ``[d * B, (d + 1) * B)`` of every global batch (B = G / data-parallel
size), so every rank yields the same number of batches. Within a rank, worker w yields the rank's
batches ``t0 + w, t0 + w + W, ...``: PyTorch's DataLoader takes one batch from each worker in
turn, so the loader's output is batch t0, t0 + 1, ... exactly.

A position is the number of real samples of the epoch already consumed (globally). Because padding
only ever sits in a stream's or the epoch's last batch, ``t * G`` consumed slots are ``t * G`` real
samples, and one integer fully describes the position.
"""

from __future__ import annotations

import numpy as np

from stream_plugin.errors import ConfigError, StateError
from stream_plugin.order.plan import EpochOrder
from stream_plugin.order.topology import Topology


def device_batch_size(global_batch_size: int, topology: Topology) -> int:
    """B = G / data-parallel size; a ConfigError unless it divides evenly."""
    ranks = topology.data_parallel_size
    if global_batch_size % ranks:
        raise ConfigError(
            f"global_batch_size: expected a multiple of the data-parallel size {ranks} "
            f"(world_size {topology.world_size} / replication {topology.replication}), found "
            f"{global_batch_size}; use device batch size x {ranks}"
        )
    return global_batch_size // ranks


def remaining_global_batches(order: EpochOrder, *, consumed: int, global_batch_size: int) -> np.ndarray:
    """The global batches still to come after ``consumed`` samples: int64 (n, global_batch_size).

    With the order's own G and ``consumed`` a multiple of it, these are the order's rows from
    ``consumed / G`` (a view). Otherwise (G changed since the epoch began, possibly more than once)
    the real samples from ``consumed`` on are re-chunked into batches of the new G; the final
    batch is padded with the first samples of that remainder. No sample is skipped or repeated.
    """
    G = order.global_batch_size
    valid_int = isinstance(consumed, (int, np.integer)) and not isinstance(consumed, (bool, np.bool_))
    if not valid_int or not 0 <= consumed <= order.batches.size:
        raise StateError(
            f"consumed: expected an int in [0, {order.batches.size}] (samples in this epoch's "
            f"{order.num_batches} batches of {G}), found {consumed!r}; pass the global count of samples "
            "consumed in the current epoch, and check the state belongs to this dataset and epoch"
        )
    consumed = int(consumed)
    if global_batch_size == G and consumed % G == 0:
        return order.batches[consumed // G :]
    if order.batching_method in ("per_stream", "device_per_stream"):
        raise StateError(
            f"global_batch_size: expected {G} with consumed a multiple of it for batching_method="
            f"{order.batching_method!r}, found global_batch_size={global_batch_size}, consumed={consumed}; "
            "re-chunking would mix streams inside a batch: finish this epoch with the old batch size"
        )
    remainder = order.real_flat()[consumed:]  # (r,)
    num_batches = -(-len(remainder) // global_batch_size)
    padded = np.resize(remainder, num_batches * global_batch_size) if len(remainder) else remainder
    return padded.reshape(num_batches, global_batch_size)


def rank_worker_batches(
    order: EpochOrder, *, consumed: int, global_batch_size: int, topology: Topology
) -> np.ndarray:
    """The device batches that ``topology``'s (rank, worker) yields from ``consumed`` on: int64 (n, B).

    Ranks in one replication group get identical batches. Every data-parallel rank gets the same
    number of batches; workers of a rank interleave (worker w takes every W-th batch from w).
    """
    B = device_batch_size(global_batch_size, topology)
    if order.device_batch_size is not None and order.device_batch_size != B:
        raise StateError(
            f"device batch size: expected {order.device_batch_size} (batching_method='device_per_stream' "
            f"planned this epoch for it), found {B} = {global_batch_size} / {topology.data_parallel_size} "
            "data-parallel ranks; resume on the same data-parallel size or start a new epoch"
        )
    batches = remaining_global_batches(
        order, consumed=consumed, global_batch_size=global_batch_size
    )  # (n, G)
    d = topology.data_parallel_rank
    rank_batches = batches[:, d * B : (d + 1) * B]  # (n, B)
    return rank_batches[topology.worker :: topology.num_workers]  # (n_w, B)
