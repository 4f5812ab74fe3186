"""What a loader needs to know about one pass: how many batches each rank yields, and their sizes.

A ``LoaderPass`` is a plain value computed from the dataset's shape when the pass begins, without
planning the order. ``StreamingDataLoader`` reads positions and batch sizes from it; the pass's plan
reaches the readers through ``StreamingDataset.handing_over``.
"""

from __future__ import annotations

from dataclasses import dataclass

from stream_plugin.errors import check_int
from stream_plugin.reading.cursor import IterationPlan


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

    def sample_in_epoch(self, batches: int) -> int:
        """Global samples of the epoch received once every rank has had ``batches`` batches of this pass."""
        return min(self.plan.start + batches * self.global_batch_size, self.samples_in_epoch)

    def batch_counts(self, batch_idx: int) -> tuple[int, int]:
        """``(size, samples before rank-balance repeats)`` of batch ``batch_idx`` of this pass."""
        check_int(
            "batch_idx",
            batch_idx,
            minimum=0,
            maximum=self.batches - 1,
            fix=f"pass the index of the batch within the current pass of {self.batches} batches",
        )
        if self.last_batch_size and batch_idx == self.batches - 1:
            return self.last_batch_size, self.last_batch_real
        return self.device_batch_size, self.device_batch_size
