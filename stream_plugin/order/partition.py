"""Slice an epoch's global batches for one (rank, DataLoader worker), from any resume point.

Data-parallel rank d reads slots ``[d * B, (d + 1) * B)`` of every full global batch (B = G /
data-parallel size). A partial last global batch (``r < G`` samples, batching ``random`` only) is
spread over the D ranks in D consecutive pieces whose sizes differ by at most one (slot order keeps each
piece on the shards of few canonical nodes), so every rank's last batch holds ``k = ceil(r / D)``
samples. A rank with one sample fewer repeats one (``k * D - r < D`` repeats in
all, none when D divides r); the repeats are not part of the order, sit at the end of the batch, and
``RankBatches.last_real`` counts what comes before them. With ``drop_last`` the partial batch is
dropped on every rank. Within a rank, worker w yields the rank's batches ``t0 + w, t0 + w + W, ...``:
PyTorch's DataLoader takes one batch from each worker in turn, so the loader's output is batch t0,
t0 + 1, ... exactly.

A position is the number of samples of the epoch already consumed (globally): ``t * G`` after t
full batches, the epoch's sample count after its last batch. One integer describes it.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def checked_device_batch_size(planned: int | None, global_batch_size: int, topology: Topology) -> int:
    """B for ``topology``; a StateError when the epoch was planned for another one (``planned``)."""
    B = device_batch_size(global_batch_size, topology)
    if planned is not None and planned != B:
        raise StateError(
            f"device batch size: expected {planned} (batching_method='device_per_stream' "
            f"planned this epoch for it), found {B} = {global_batch_size} / {topology.data_parallel_size} "
            "data-parallel ranks; resume on the same data-parallel size or start a new epoch"
        )
    return B


@dataclass(frozen=True, eq=False)
class PassBatches:
    """The global batches of a pass: whole ones, then the samples of a partial last one."""

    full: np.ndarray  # int64 (n, G)
    tail: np.ndarray  # int64 (r,), 0 <= r < G: the partial last global batch (empty when none)

    def num_batches(self, *, drop_last: bool = False) -> int:
        """Batches every rank yields: the whole ones, plus the partial one unless it is dropped."""
        return len(self.full) + (1 if len(self.tail) and not drop_last else 0)

    def num_samples(self, *, drop_last: bool = False) -> int:
        """Samples of the order the pass yields over all ranks (rank-balance repeats not counted)."""
        return self.full.size + (0 if drop_last else len(self.tail))


@dataclass(frozen=True, eq=False)
class RankBatches:
    """What one (rank, worker) yields in a pass: whole device batches, then maybe a short last one."""

    full: np.ndarray  # int64 (n_w, B)
    last: np.ndarray  # int64 (k,): the rank's share of the partial last global batch (empty: none here)
    last_real: int  # samples of ``last`` that are not rank-balance repeats (they come first)

    @property
    def num_batches(self) -> int:
        return len(self.full) + (1 if len(self.last) else 0)

    def flat(self) -> np.ndarray:
        """The sample ids in the order they are read: int64 (n_w * B + k,)."""
        if not len(self.last):
            return self.full.reshape(-1)
        return np.concatenate([self.full.reshape(-1), self.last])


def check_consumed(order: EpochOrder, consumed: object) -> int:
    """``consumed`` as an int in [0, samples of the epoch]; a StateError otherwise."""
    return check_consumed_count(order.num_samples, order.num_batches, order.global_batch_size, consumed)


def check_consumed_count(num_samples: int, num_batches: int, epoch_batch_size: int, consumed: object) -> int:
    """``consumed`` as an int in [0, num_samples] for an epoch of ``num_batches`` batches; a StateError otherwise."""
    valid_int = isinstance(consumed, (int, np.integer)) and not isinstance(consumed, (bool, np.bool_))
    if not valid_int or not 0 <= consumed <= num_samples:  # type: ignore[operator]
        raise StateError(
            f"consumed: expected an int in [0, {num_samples}] (samples in this epoch's "
            f"{num_batches} batches of {epoch_batch_size}), found {consumed!r}; pass the global "
            "count of samples consumed in the current epoch, and check the state belongs to this dataset and epoch"
        )
    return int(consumed)  # type: ignore[call-overload]


def needs_rechunk(batching_method: str, epoch_batch_size: int, global_batch_size: int, consumed: int) -> bool:
    """Whether the rest of the epoch must be cut into new batches (G changed, or a mid-batch position);
    a StateError for the batching methods whose batches cannot be re-cut."""
    if global_batch_size == epoch_batch_size and consumed % epoch_batch_size == 0:
        return False
    if batching_method in ("per_stream", "device_per_stream"):
        raise StateError(
            f"global_batch_size: expected {epoch_batch_size} with consumed a multiple of it for batching_method="
            f"{batching_method!r}, found global_batch_size={global_batch_size}, consumed={consumed}; "
            "re-chunking would mix streams inside a batch: finish this epoch with the old batch size"
        )
    return True


def remaining_counts(num_samples: int, *, consumed: int, global_batch_size: int) -> tuple[int, int]:
    """``(whole global batches, samples of the partial last one)`` still to come after ``consumed``."""
    return divmod(num_samples - consumed, global_batch_size)


def rank_last_size(tail_size: int, data_parallel_size: int, rank: int) -> tuple[int, int]:
    """``(len, real)`` of ``split_tail``'s share for a tail of ``tail_size`` samples, without the samples."""
    if not tail_size:
        return 0, 0
    base, extra = divmod(tail_size, data_parallel_size)
    real = base + (1 if rank < extra else 0)
    return real + (1 if extra and real == base else 0), real


def remaining_global_batches(order: EpochOrder, *, consumed: int, global_batch_size: int) -> PassBatches:
    """The global batches still to come after ``consumed`` samples.

    With the order's own G and ``consumed`` a multiple of it, these are the order's rows from
    ``consumed / G`` (views). Otherwise (G changed since the epoch began, possibly more than once)
    the samples from ``consumed`` on are re-chunked into batches of the new G, the last one partial.
    No sample is skipped or repeated.
    """
    G = order.global_batch_size
    consumed = check_consumed(order, consumed)
    if not needs_rechunk(order.batching_method, G, global_batch_size, consumed):
        return PassBatches(order.batches[consumed // G : order.full_batches], order.tail)
    remainder = order.real_flat()[consumed:]  # (m,)
    num_full = len(remainder) // global_batch_size
    full = remainder[: num_full * global_batch_size].reshape(num_full, global_batch_size)
    return PassBatches(full, remainder[num_full * global_batch_size :])


def split_tail(tail: np.ndarray, data_parallel_size: int, rank: int) -> tuple[np.ndarray, int]:
    """Rank ``rank``'s share of a partial global batch, and how many of it are not repeats.

    The first ``r % D`` ranks take ``ceil(r / D)`` consecutive samples, the others one fewer, padded with
    one repeat (of the rank's own first sample, or of ``tail[d % r]`` when it has none), so the D shares
    hold fewer than D repeats in all, and none when D divides r.
    """
    r, D = len(tail), data_parallel_size
    if not r:
        return tail[:0], 0
    base, extra = divmod(r, D)
    start = rank * base + min(rank, extra)
    real = base + (1 if rank < extra else 0)
    share = tail[start : start + real]  # (real,)
    if extra and real == base:
        source = start if real else rank % r
        share = np.concatenate([share, tail[source : source + 1]])
    return share, real


def rank_worker_batches(
    order: EpochOrder,
    *,
    consumed: int,
    global_batch_size: int,
    topology: Topology,
    drop_last: bool = False,
) -> RankBatches:
    """The device batches that ``topology``'s (rank, worker) yields from ``consumed`` on.

    Ranks in one replication group get identical batches. Every data-parallel rank gets the same
    number of batches; workers of a rank interleave (worker w takes every W-th batch from w).
    """
    B = checked_device_batch_size(order.device_batch_size, global_batch_size, topology)
    batches = remaining_global_batches(order, consumed=consumed, global_batch_size=global_batch_size)
    d, W = topology.data_parallel_rank, topology.num_workers
    rank_full = batches.full[:, d * B : (d + 1) * B]  # (n, B)
    full = rank_full[topology.worker :: W]  # (n_w, B)
    has_last = len(batches.tail) and not drop_last and len(batches.full) % W == topology.worker
    if not has_last:
        return RankBatches(full, batches.tail[:0], 0)
    last, real = split_tail(batches.tail, topology.data_parallel_size, d)
    return RankBatches(full, last, real)
