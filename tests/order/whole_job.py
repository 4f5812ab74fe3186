"""Shared helpers of tests/order: rebuild what a whole job sees from every (rank, worker), and resume it.

``job_batches`` simulates a training job without processes: it asks the order engine for every
(rank, worker) slice, interleaves each rank's workers the way PyTorch's DataLoader does (one batch
per worker in turn), checks replication groups and per-rank batch counts, and glues the
data-parallel ranks' device batches back into global batches.

``assert_job_resumes_identically`` stops such a job after k global batches, resumes it on another
layout (topology and/or global batch size), possibly several times in a row, and checks, through the
shared ``support.resume`` helper, that the samples seen are exactly the uninterrupted epoch: no sample
skipped, none repeated, same order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
from support.resume import END_OF_PASS, assert_resumes_identically

from stream_plugin.order.partition import rank_worker_batches
from stream_plugin.order.plan import EpochOrder
from stream_plugin.order.topology import Topology

Layout = tuple[Topology, int]  # (the job's topology, its global batch size)
Rows = list[np.ndarray]  # global batches, each the samples of one batch in slot order (the last may be short)
JobFn = Callable[[EpochOrder, int, int, Topology], Rows]


def order_rows(order: EpochOrder) -> Rows:
    """The order's global batches without their empty slots."""
    rows = list(order.batches[: order.full_batches])
    return [*rows, order.tail] if order.num_padded else rows


def assert_rows_equal(actual: Rows, expected: Rows, err_msg: str = "") -> None:
    assert len(actual) == len(expected), f"{err_msg}: {len(actual)} batches, expected {len(expected)}"
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        np.testing.assert_array_equal(got, want, err_msg=f"{err_msg}: batch {index}")


def loader_batches(
    order: EpochOrder, *, consumed: int, global_batch_size: int, topology: Topology, drop_last: bool = False
) -> list[tuple[np.ndarray, int]]:
    """What ``topology.rank``'s DataLoader yields: its workers' batches round-robin.

    One ``(device batch, samples before rank-balance repeats)`` per step.
    """
    per_worker = [
        rank_worker_batches(
            order,
            consumed=consumed,
            global_batch_size=global_batch_size,
            topology=topology.with_position(topology.rank, worker),
            drop_last=drop_last,
        )
        for worker in range(topology.num_workers)
    ]
    total = sum(part.num_batches for part in per_worker)
    steps: list[tuple[np.ndarray, int] | None] = [None] * total
    for worker, part in enumerate(per_worker):
        # Worker w serves loader steps w, w + W, ...; it must hold exactly that many batches.
        mine = list(range(worker, total, topology.num_workers))
        assert len(mine) == part.num_batches, "workers are unbalanced"
        batches = [(row, len(row)) for row in part.full]
        if len(part.last):
            assert mine[-1] == total - 1, "a short batch that is not the rank's last"
            batches.append((part.last, part.last_real))
        for step, batch in zip(mine, batches, strict=True):
            steps[step] = batch
    return [step for step in steps if step is not None]


def job_batches(
    order: EpochOrder, consumed: int, global_batch_size: int, topology: Topology, drop_last: bool = False
) -> Rows:
    """The global batches the whole job yields from ``consumed``, rebuilt from every rank.

    Checks that every rank yields the same number of batches, of the same size, that replication
    groups agree, and that rank-balance repeats are fewer than the data-parallel size; the rebuilt
    batches leave the repeats out.
    """
    per_rank = [
        loader_batches(
            order,
            consumed=consumed,
            global_batch_size=global_batch_size,
            topology=topology.with_position(rank),
            drop_last=drop_last,
        )
        for rank in range(topology.world_size)
    ]
    lengths = {len(batches) for batches in per_rank}
    assert len(lengths) == 1, f"ranks yield different batch counts {sorted(lengths)}: DDP would hang"
    for rank, batches in enumerate(per_rank):
        leader = per_rank[rank - rank % topology.replication]
        for (mine, _), (theirs, _) in zip(batches, leader, strict=True):
            np.testing.assert_array_equal(mine, theirs, err_msg=f"rank {rank} differs from its replication group")
    data_parallel = per_rank[:: topology.replication]  # one per data-parallel rank, in order
    D = len(data_parallel)
    rows: Rows = []
    for step in range(lengths.pop()):
        shares = [batches[step] for batches in data_parallel]
        sizes = {len(batch) for batch, _ in shares}
        assert len(sizes) == 1, f"step {step}: ranks yield batches of sizes {sorted(sizes)}"
        real = [batch[:count] for batch, count in shares]
        repeats = sum(len(batch) - count for batch, count in shares)
        if all(count == len(batch) for batch, count in shares) and sizes == {global_batch_size // D}:
            rows.append(np.concatenate(real))
            continue
        assert repeats < D, f"step {step}: {repeats} rank-balance repeats on {D} ranks"
        rows.append(np.concatenate(real))  # the ranks hold consecutive pieces of the partial batch
    return rows


class JobReader:
    """One epoch of ``order`` as the whole job on one layout yields it, global batch by global batch.

    Its state is the number of samples consumed, the one number the order needs to resume from.
    """

    def __init__(self, order: EpochOrder, layout: Layout, job: JobFn = job_batches) -> None:
        self.order, self.job = order, job
        self.topology, self.global_batch_size = layout
        self.consumed = 0

    def __iter__(self) -> Iterator[np.ndarray]:
        for row in self.job(self.order, self.consumed, self.global_batch_size, self.topology):
            self.consumed += len(row)
            yield row

    def state_dict(self) -> dict[str, Any]:
        return {"consumed": self.consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.consumed = state["consumed"]


def row_ids(row: np.ndarray) -> list[int]:
    return [int(i) for i in row]


def assert_job_resumes_identically(
    order: EpochOrder,
    layouts: Sequence[Layout],
    *,
    cuts: Iterable[Sequence[int]] | None = None,
    job: JobFn = job_batches,
) -> None:
    """Interrupt and resume across ``layouts`` at every cut; the samples seen must equal the epoch's.

    ``cuts`` lists, per trial, how many global batches each layout but the last runs (default: every
    cut for two layouts, a grid for more). Checks: the concatenated samples equal the uninterrupted
    epoch exactly; with an unchanged global batch size the batches themselves equal the order's rows;
    only the very last batch may be short.
    """
    trials = list(cuts if cuts is not None else default_cuts(order, layouts))
    same_batch_size = all(size == order.global_batch_size for _, size in layouts)
    expected = [*(row_ids(row) for row in order_rows(order)), END_OF_PASS]
    makers = [partial(JobReader, order, layout, job) for layout in layouts]
    results = assert_resumes_identically(
        makers, trials, expected=expected, read=row_ids, flatten=not same_batch_size
    )
    for trial, segments in zip(trials, results, strict=True):
        sized = [(size, row) for (_, size), rows in zip(layouts, segments, strict=True) for row in rows]
        short = [len(row) for size, row in sized[:-1] if len(row) != size]
        assert not short, f"cuts {trial}: short batches {short} before the epoch's last"


def default_cuts(
    order: EpochOrder, layouts: Sequence[Layout], max_per_axis: int = 12
) -> list[tuple[int, ...]]:
    """Every cut for two layouts; for more, up to ``max_per_axis`` evenly spread cuts per resume."""
    first_batches = -(-order.num_samples // layouts[0][1])
    if len(layouts) == 2:
        return [(cut,) for cut in range(first_batches + 1)]
    axis = sorted({int(x) for x in np.linspace(0, first_batches // 2, max_per_axis)})
    return list(itertools.product(axis, repeat=len(layouts) - 1))
