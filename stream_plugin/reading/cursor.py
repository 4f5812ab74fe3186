"""Where a dataset's next pass starts, and where the current one stands: plain values only.

The main process's cursor is driven by the loader (``begin`` before workers start, ``end`` when a pass
runs to its end). The pass the loader began reaches the processes that read it as a ``Handoff``: a
plain value on the cursor while those readers start (DataLoader workers get a copy of the dataset when
they start). Persistent workers then advance one epoch per pass on their own, exactly as the main
process does when nothing was loaded in between, or, when the loader started them to replay, repeat
their first pass (evaluation rewinds to one epoch every pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stream_plugin.reading.state import ResumeState


@dataclass(frozen=True)
class IterationPlan:
    """Where one pass starts: epoch, global samples already consumed, and the epoch's batch size."""

    epoch: int
    start: int
    epoch_batch_size: int
    num_canonical_nodes: int


@dataclass(frozen=True)
class Handoff:
    """The pass a loader began, for the readers it starts: this process, or its DataLoader workers."""

    plan: IterationPlan
    replay: bool = False  # persistent workers started with it repeat it at every pass


@dataclass(frozen=True)
class Position:
    """A position in the global order: the pass it belongs to and the global samples consumed in its epoch."""

    plan: IterationPlan
    consumed: int


def persistent_worker_plan(
    first: IterationPlan, passes_before: int, *, replays: bool, global_batch_size: int
) -> IterationPlan:
    """The plan of a worker's pass after ``passes_before`` passes that began with ``first``.

    One rule for the worker that runs the pass and for the loader that decides whether to keep it.
    """
    if passes_before == 0 or replays:
        return first
    return IterationPlan(first.epoch + passes_before, 0, global_batch_size, first.num_canonical_nodes)


class EpochCursor:
    """The epoch bookkeeping of one dataset object (one per process after pickling)."""

    def __init__(self) -> None:
        self.next_epoch = 0
        self.pending: ResumeState | None = None  # loaded, applied by the next pass
        self.active: IterationPlan | None = None  # the pass in progress (or abandoned mid-way)
        self.finished: IterationPlan | None = None  # the last pass handed out to its end
        self.handoff: Handoff | None = None  # the pass a loader began, while its readers start
        self.worker_start: Handoff | None = None  # in a worker: the pass it started with
        self.passes_here = 0  # passes run by this (worker) process

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["passes_here"] = 0  # a new worker has run nothing yet
        state["worker_start"] = None
        return state

    def begin(self, *, global_batch_size: int, num_canonical_nodes: int) -> IterationPlan:
        """Plan the next pass: a loaded state once, else the epoch after the last one begun."""
        if self.pending is not None:
            state, self.pending = self.pending, None
            # Nothing of an epoch at sample 0 was consumed: plan it with today's batch size, as a
            # fresh run would; a started epoch keeps the size its order was built with.
            batch_size = state.epoch_batch_size if state.sample_in_epoch else global_batch_size
            plan = IterationPlan(state.epoch, state.sample_in_epoch, batch_size, state.num_canonical_nodes)
        else:
            epoch = self.active.epoch + 1 if self.active is not None else self.next_epoch
            plan = IterationPlan(epoch, 0, global_batch_size, num_canonical_nodes)
        self.active = plan
        self.finished = None
        self.next_epoch = plan.epoch + 1
        return plan

    def end(self, plan: IterationPlan) -> None:
        """Every batch of the pass ``plan`` was handed out: its epoch is finished.

        Called before the last batch is consumed, too: a caller such as Composer reads an epoch with
        ``islice`` and never resumes the iterator after its last batch.
        """
        if self.active == plan:
            self.active = None
            self.finished = plan
            self.next_epoch = plan.epoch + 1

    def plan_in_main_process(self, *, global_batch_size: int, num_canonical_nodes: int) -> IterationPlan:
        """The plan for a pass run by the main process (no DataLoader workers)."""
        if self.handoff is not None:
            plan, self.handoff = self.handoff.plan, None
            return plan
        return self.begin(global_batch_size=global_batch_size, num_canonical_nodes=num_canonical_nodes)

    def plan_in_worker(self, *, global_batch_size: int, num_canonical_nodes: int) -> IterationPlan:
        """The plan for a pass run by a DataLoader worker: the one it started with, then the next epochs
        (or the same pass again, when the loader started it to replay)."""
        if self.worker_start is None:
            if self.handoff is not None:
                self.worker_start = self.handoff
            else:
                # A plain DataLoader started this worker: the main process never planned (see set_epoch).
                first = self.active or IterationPlan(self.next_epoch, 0, global_batch_size, num_canonical_nodes)
                self.worker_start = Handoff(first)
        start = self.worker_start
        plan = persistent_worker_plan(
            start.plan, self.passes_here, replays=start.replay, global_batch_size=global_batch_size
        )
        self.passes_here += 1
        return plan

    def position(
        self, num_samples: int, from_beginning: bool, *, global_batch_size: int, num_canonical_nodes: int
    ) -> Position:
        """The position after ``num_samples`` (Composer's convention); a loaded state's, before it is read.

        After a pass was handed out to its end, ``num_samples == 0`` is the start of the next epoch (a
        finished epoch is never replayed), while a count is a position in the finished epoch: Composer
        saves on an epoch's last batch before its clock moves on, and resuming there yields an empty
        pass that ends the epoch.
        """
        if self.active is not None:
            plan = self.active
            return Position(plan, num_samples if from_beginning else plan.start + num_samples)
        pending = self.pending
        if pending is not None:
            plan = IterationPlan(pending.epoch, 0, pending.epoch_batch_size, pending.num_canonical_nodes)
            if num_samples == 0:
                return Position(plan, pending.sample_in_epoch)
            return Position(plan, num_samples)
        if self.finished is not None and num_samples:
            plan = self.finished
            return Position(plan, num_samples if from_beginning else plan.start + num_samples)
        return Position(IterationPlan(self.next_epoch, 0, global_batch_size, num_canonical_nodes), num_samples)

    def load(self, state: ResumeState | None) -> None:
        """Start the next pass at ``state`` (None: forget any loaded state)."""
        self.pending = state
        if state is not None:
            self.active = None
            self.finished = None
            self.next_epoch = state.epoch

    def set_epoch(self, epoch: int) -> None:
        self.pending = None
        self.active = None
        self.finished = None
        self.next_epoch = epoch
