"""What a loader needs to know about one pass: how many batches each rank yields, and their sizes.

A ``LoaderPass`` is a plain value computed from the dataset's shape when the pass begins, without
planning the order (``PassCounter``, which also counts an epoch's samples and a device's share).
``StreamingDataLoader`` reads positions and batch sizes from it; the pass's plan reaches the readers
through ``StreamingDataset.handing_over``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stream_plugin.errors import check_int
from stream_plugin.order.partition import (
    check_consumed_count,
    needs_rechunk,
    rank_last_size,
    remaining_counts,
)
from stream_plugin.reading.cursor import IterationPlan
from stream_plugin.reading.epochs import EpochPlanner, check_canonical_nodes


@dataclass(frozen=True)
class LoaderPass:
    """One pass over a dataset, as a loader on one rank sees it."""

    plan: IterationPlan
    batches: int  # batches every rank yields in this pass (fewer than len(loader) after a resume)
    device_batch_size: int
    global_batch_size: int
    samples_in_epoch: int  # the epoch's samples over all ranks: the largest position a state can hold
    last_batch_size: int  # this rank's last batch of the pass when it is a short one, else 0
    last_batch_real: int  # its samples before the rank-balance repeats
    first_replica: bool = True  # this rank counts its samples (the others of its replica set count none)

    def sample_in_epoch(self, batches: int) -> int:
        """Global samples of the epoch received once every rank has had ``batches`` batches of this pass."""
        return min(self.plan.start + batches * self.global_batch_size, self.samples_in_epoch)

    def batch_counts(self, batch_idx: int) -> tuple[int, int]:
        """``(size, samples to count)`` of batch ``batch_idx`` of this pass: the samples before the
        rank-balance repeats, and none on a replica other than the first of its set (tensor or context
        parallel ranks read the same batch; counted once, it is counted once over the world)."""
        check_int(
            "batch_idx",
            batch_idx,
            minimum=0,
            maximum=self.batches - 1,
            fix=f"pass the index of the batch within the current pass of {self.batches} batches",
        )
        if self.last_batch_size and batch_idx == self.batches - 1:
            size, real = self.last_batch_size, self.last_batch_real
        else:
            size, real = self.device_batch_size, self.device_batch_size
        return size, real if self.first_replica else 0


@dataclass(frozen=True)
class PassCounter:
    """Counts an epoch's and a pass's batches and samples for one rank, without planning the order."""

    planner: EpochPlanner
    device_batch_size: int
    data_parallel_size: int  # ranks that read different samples
    data_parallel_rank: int  # this rank's place among them
    drop_last: bool
    batching_method: str
    first_replica: bool = True  # the first rank of its replica set (``LoaderPass.first_replica``)

    @property
    def global_batch_size(self) -> int:
        return self.device_batch_size * self.data_parallel_size

    def samples_in_epoch(self, global_batch_size: int | None = None) -> int:
        """Samples an epoch ordered for ``global_batch_size`` (default: today's) holds over all ranks: the
        largest ``sample_in_epoch`` a state can hold. ``epoch_size`` for ``random`` batching; the whole
        batches only for the other methods."""
        size = self.global_batch_size if global_batch_size is None else global_batch_size
        full, rest = self.planner.batch_counts(global_batch_size=size, device_batch_size=self.device_batch_size)
        return full * size + rest

    def device_samples(self) -> int:
        """Samples this device yields per epoch: its share of every whole global batch, plus its share
        of a partial last one (``ceil(rest / data-parallel ranks)``, none with ``drop_last``)."""
        full, rest = self.planner.batch_counts(
            global_batch_size=self.global_batch_size, device_batch_size=self.device_batch_size
        )
        last = 0 if self.drop_last or not rest else math.ceil(rest / self.data_parallel_size)
        return full * self.device_batch_size + last

    def loader_pass(self, plan: IterationPlan) -> LoaderPass:
        """The counts a loader needs for ``plan``'s pass."""
        samples = self.samples_in_epoch(plan.epoch_batch_size)
        full, tail = self.remaining_counts(plan, samples)
        drop = self.drop_last or not tail
        size, real = (0, 0) if drop else rank_last_size(tail, self.data_parallel_size, self.data_parallel_rank)
        return LoaderPass(
            plan=plan,
            batches=full + (0 if drop else 1),
            device_batch_size=self.device_batch_size,
            global_batch_size=self.global_batch_size,
            samples_in_epoch=samples,
            last_batch_size=size,
            last_batch_real=real,
            first_replica=self.first_replica,
        )

    def remaining_counts(self, plan: IterationPlan, samples: int) -> tuple[int, int]:
        """``(whole global batches, samples of a partial last one)`` of ``plan``'s pass, whose epoch holds
        ``samples`` (``samples_in_epoch``)."""
        check_canonical_nodes(self.planner.epoch_size, plan.num_canonical_nodes)
        epoch_batch_size = plan.epoch_batch_size
        consumed = check_consumed_count(samples, -(-samples // epoch_batch_size), epoch_batch_size, plan.start)
        needs_rechunk(self.batching_method, epoch_batch_size, self.global_batch_size, consumed)
        return remaining_counts(samples, consumed=consumed, global_batch_size=self.global_batch_size)


__all__ = ["LoaderPass", "PassCounter"]
