"""Where a dataset's next pass starts, and where the current one stands: plain values only.

The main process's cursor is driven by the loader (``begin`` before workers start, ``end`` when a pass
runs to its end). Workers receive a copy when they start; persistent workers then advance one epoch
per pass on their own, exactly as the main process does when nothing was loaded in between.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stream_plugin.state import ResumeState


@dataclass(frozen=True)
class IterationPlan:
    """Where one pass starts: epoch, global samples already consumed, and the epoch's batch size."""

    epoch: int
    start: int
    epoch_batch_size: int
    num_canonical_nodes: int


class EpochCursor:
    """The epoch bookkeeping of one dataset object (one per process after pickling)."""

    def __init__(self) -> None:
        self.next_epoch = 0
        self.pending: ResumeState | None = None  # loaded, applied by the next pass
        self.active: IterationPlan | None = None  # the pass in progress (or abandoned mid-way)
        self.loader_began = False  # the loader planned the pass the main process runs next
        self.passes_here = 0  # passes run by this (worker) process

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["passes_here"] = 0  # a new worker has run nothing yet
        return state

    def begin(self, *, global_batch_size: int, num_canonical_nodes: int) -> IterationPlan:
        """Plan the next pass: a loaded state once, else the epoch after the last one begun."""
        if self.pending is not None:
            state, self.pending = self.pending, None
            plan = IterationPlan(
                state.epoch, state.sample_in_epoch, state.epoch_batch_size, state.num_canonical_nodes
            )
        else:
            epoch = self.active.epoch + 1 if self.active is not None else self.next_epoch
            plan = IterationPlan(epoch, 0, global_batch_size, num_canonical_nodes)
        self.active = plan
        self.next_epoch = plan.epoch + 1
        return plan

    def end(self, plan: IterationPlan) -> None:
        """The pass ``plan`` ran to its end: the epoch is finished."""
        if self.active == plan:
            self.active = None
            self.next_epoch = plan.epoch + 1

    def plan_in_main_process(self, *, global_batch_size: int, num_canonical_nodes: int) -> IterationPlan:
        """The plan for a pass run by the main process (no DataLoader workers)."""
        if self.loader_began and self.active is not None:
            self.loader_began = False
            return self.active
        return self.begin(global_batch_size=global_batch_size, num_canonical_nodes=num_canonical_nodes)

    def plan_in_worker(self, *, global_batch_size: int, num_canonical_nodes: int) -> IterationPlan:
        """The plan for a pass run by a DataLoader worker: the one it started with, then the next epochs."""
        if self.active is None:
            # A plain DataLoader started this worker: the main process never planned (see set_epoch).
            self.active = IterationPlan(self.next_epoch, 0, global_batch_size, num_canonical_nodes)
        plan = self.active
        if self.passes_here:
            plan = IterationPlan(
                plan.epoch + self.passes_here, 0, global_batch_size, plan.num_canonical_nodes
            )
        self.passes_here += 1
        return plan

    def position(
        self,
        num_samples: int,
        from_beginning: bool,
        *,
        epoch_samples: Callable[[IterationPlan], int],
        global_batch_size: int,
        num_canonical_nodes: int,
    ) -> tuple[IterationPlan, int] | ResumeState:
        """The plan and consumed count after ``num_samples`` (Composer's convention), or a loaded state.

        A pass consumed to its end, or ``num_samples == 0`` between passes, is the start of the next
        epoch: a finished epoch is never replayed.
        """
        if self.active is not None:
            plan = self.active
            consumed = num_samples if from_beginning else plan.start + num_samples
            if consumed >= epoch_samples(plan):
                return IterationPlan(plan.epoch + 1, 0, global_batch_size, plan.num_canonical_nodes), 0
            return plan, consumed
        if self.pending is not None and num_samples == 0:
            return self.pending
        return IterationPlan(self.next_epoch, 0, global_batch_size, num_canonical_nodes), num_samples

    def load(self, state: ResumeState | None) -> None:
        """Start the next pass at ``state`` (None: forget any loaded state)."""
        self.pending = state
        if state is not None:
            self.active = None
            self.next_epoch = state.epoch

    def set_epoch(self, epoch: int) -> None:
        self.pending = None
        self.active = None
        self.next_epoch = epoch
