"""Shared test helpers: rebuild what a whole job sees from every (rank, worker), and check resumption.

``job_batches`` simulates a training job without processes: it asks the order engine for every
(rank, worker) slice, interleaves each rank's workers the way PyTorch's DataLoader does (one batch
per worker in turn), checks replication groups and per-rank batch counts, and glues the
data-parallel ranks' device batches back into global batches.

``assert_resumes_identically`` stops a run after k global batches, resumes it on another layout
(topology and/or global batch size), possibly several times in a row, and checks the samples
seen are exactly the uninterrupted epoch: no sample skipped, none repeated, same order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from stream_plugin.order.partition import rank_worker_batches
from stream_plugin.order.plan import EpochOrder
from stream_plugin.order.topology import Topology

Layout = tuple[Topology, int]  # (the job's topology, its global batch size)
JobFn = Callable[[EpochOrder, int, int, Topology], np.ndarray]


def loader_batches(
    order: EpochOrder, *, consumed: int, global_batch_size: int, topology: Topology
) -> np.ndarray:
    """What ``topology.rank``'s DataLoader yields: its workers' batches round-robin. int64 (n, B)."""
    per_worker = [
        rank_worker_batches(
            order,
            consumed=consumed,
            global_batch_size=global_batch_size,
            topology=topology.with_position(topology.rank, worker),
        )
        for worker in range(topology.num_workers)
    ]  # W x (n_w, B)
    total = sum(len(batches) for batches in per_worker)
    device_batch = global_batch_size // topology.data_parallel_size
    loader = np.empty((total, device_batch), dtype=np.int64)
    for worker, batches in enumerate(per_worker):
        # Worker w serves loader steps w, w + W, ...; it must hold exactly that many batches.
        assert len(loader[worker :: topology.num_workers]) == len(batches), "workers are unbalanced"
        loader[worker :: topology.num_workers] = batches
    return loader


def job_batches(order: EpochOrder, consumed: int, global_batch_size: int, topology: Topology) -> np.ndarray:
    """The global batches the whole job yields from ``consumed``, rebuilt from every rank: (n, G)."""
    per_rank = [
        loader_batches(
            order,
            consumed=consumed,
            global_batch_size=global_batch_size,
            topology=topology.with_position(rank),
        )
        for rank in range(topology.world_size)
    ]  # world x (n, B)
    lengths = {len(batches) for batches in per_rank}
    assert len(lengths) == 1, f"ranks yield different batch counts {sorted(lengths)}: DDP would hang"
    for rank, batches in enumerate(per_rank):
        leader = per_rank[rank - rank % topology.replication]
        np.testing.assert_array_equal(
            batches, leader, err_msg=f"rank {rank} differs from its replication group"
        )
    data_parallel = per_rank[:: topology.replication]  # one per data-parallel rank, in order
    return np.concatenate(data_parallel, axis=1)  # (n, G)


def run_segments(
    order: EpochOrder, layouts: Sequence[Layout], cuts: Sequence[int], job: JobFn = job_batches
) -> list[tuple[int, np.ndarray]]:
    """Run ``layouts[i]`` for ``cuts[i]`` global batches, then resume on the next; the last runs to the end.

    Returns ``(consumed at start, global batches yielded)`` per segment that yielded anything.
    """
    assert len(cuts) == len(layouts) - 1
    consumed, segments = 0, []
    for (topology, global_batch_size), cut in zip(layouts, [*cuts, None], strict=True):
        batches = job(order, consumed, global_batch_size, topology)
        taken = batches if cut is None else batches[:cut]
        segments.append((consumed, taken))
        if len(taken) == len(batches):  # the epoch is over: nothing left to resume
            break
        consumed += len(taken) * global_batch_size
    return segments


def real_samples(order: EpochOrder, consumed: int, batches: np.ndarray) -> np.ndarray:
    """The non-padding samples among ``batches`` (yielded from ``consumed``), in order."""
    flat = batches.reshape(-1)
    G = order.global_batch_size
    if batches.shape[1] == G and consumed % G == 0:  # the order's own rows: padding at known positions
        positions = np.arange(consumed, consumed + flat.size)
        return flat[~np.isin(positions, order.pad_positions)]
    return flat[: max(0, order.num_samples - consumed)]  # re-chunked: padding only after the real tail


def assert_resumes_identically(
    order: EpochOrder,
    layouts: Sequence[Layout],
    *,
    cuts: Iterable[Sequence[int]] | None = None,
    job: JobFn = job_batches,
) -> None:
    """Interrupt and resume across ``layouts`` at every cut; the samples seen must equal the epoch's.

    ``cuts`` lists, per trial, how many global batches each layout but the last runs (default: every
    cut for two layouts, a grid for more). Checks: the concatenated real samples equal the
    uninterrupted epoch exactly; with an unchanged global batch size the batches themselves equal
    the order's rows; padding only in the final batch and below one batch.
    """
    reference = order.real_flat()
    same_batch_size = all(size == order.global_batch_size for _, size in layouts)
    for trial in cuts if cuts is not None else default_cuts(order, layouts):
        segments = run_segments(order, layouts, trial, job)
        seen = np.concatenate([real_samples(order, consumed, batches) for consumed, batches in segments])
        np.testing.assert_array_equal(
            seen, reference, err_msg=f"cuts {trial} skip, repeat or reorder samples"
        )
        if same_batch_size:
            rows = np.concatenate([batches for _, batches in segments])
            np.testing.assert_array_equal(
                rows, order.batches, err_msg=f"cuts {trial} change the global batches"
            )
        if not same_batch_size:  # re-chunked: padding only completes the very last batch
            consumed, last = segments[-1]
            padding = last.size - (order.num_samples - consumed)
            assert 0 <= padding < max(1, last.shape[1]), f"cuts {trial}: {padding} padding slots"


def default_cuts(
    order: EpochOrder, layouts: Sequence[Layout], max_per_axis: int = 12
) -> list[tuple[int, ...]]:
    """Every cut for two layouts; for more, up to ``max_per_axis`` evenly spread cuts per resume."""
    first_batches = -(-order.num_samples // layouts[0][1])
    if len(layouts) == 2:
        return [(cut,) for cut in range(first_batches + 1)]
    axis = sorted({int(x) for x in np.linspace(0, first_batches // 2, max_per_axis)})
    return list(itertools.product(axis, repeat=len(layouts) - 1))
