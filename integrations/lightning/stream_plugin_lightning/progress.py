"""Where training is, by Lightning's own progress counters, and the data state that position implies.

Lightning's counters, not the loader's, are the authority: the loader may have handed out a batch that
training has not finished (a fetch ahead, a step interrupted by an exception or a manual save), and on
restore Lightning replays exactly the batches its counters say are unfinished. So the data state we save
is computed from the counters with Lightning's own restore rules, and it is the same on every rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import lightning.pytorch as pl
from lightning.pytorch.loops.progress import _ProcessedTracker

from stream_plugin import StreamingDataset, resume_state_at


@dataclass(frozen=True)
class TrainPosition:
    """``batches`` of Lightning epoch ``epoch`` are done: a resume continues with the batch after them."""

    epoch: int
    batches: int


def train_position(trainer: pl.Trainer) -> TrainPosition:
    """The position a checkpoint written now resumes at, by Lightning 2.6's restore rules.

    - Epochs: ``epoch_progress.current`` counts ready, started, processed and completed epochs. An epoch
      is in progress from ``started`` until ``completed``; outside that window the batch counters still
      describe the previous epoch (they are reset only when the next epoch's batch loop starts), and the
      position is the start of epoch ``completed``.
    - Batches: a checkpoint written in ``on_train_batch_end`` has ``completed == processed - 1`` in the
      totals; on restore Lightning counts that batch as done (``restarted_on_train_batch_end``). Any other
      time, only ``completed`` batches count: a batch interrupted mid-step is trained again.
    """
    epochs = _counters(trainer.fit_loop.epoch_progress.current)
    if epochs.started == epochs.completed:
        return TrainPosition(epoch=epochs.completed, batches=0)
    batch_progress = trainer.fit_loop.epoch_loop.batch_progress
    total, current = _counters(batch_progress.total), _counters(batch_progress.current)
    saved_at_batch_end = (
        total.ready == total.started == total.processed and total.completed == total.processed - 1
    )
    done = current.processed if saved_at_batch_end else current.completed
    return TrainPosition(epoch=epochs.completed, batches=done)


def _counters(tracker: object) -> _ProcessedTracker:
    # Lightning annotates the loops' trackers with a base class; the fit and epoch loops' trackers
    # count ready, started, processed and completed.
    return cast(_ProcessedTracker, tracker)


def batches_per_epoch(dataset: StreamingDataset, trainer: pl.Trainer | None = None) -> int:
    """Loader batches per Lightning epoch on each rank: the dataset's, cut by ``limit_train_batches``."""
    full = math.ceil(len(dataset) / (dataset.batch_size or 1))
    limit = trainer.num_training_batches if trainer is not None else math.inf
    return int(min(full, limit)) if limit != math.inf else full


def state_at(dataset: StreamingDataset, position: TrainPosition, per_epoch: int) -> dict[str, int | str]:
    """The dataset resume state for ``position`` (``stream_plugin.resume_state_at``); a finished epoch
    becomes the start of the next one."""
    epoch, batches = position.epoch, position.batches
    if batches >= per_epoch:
        epoch, batches = epoch + 1, 0
    return resume_state_at(dataset, epoch, batches * dataset.global_batch_size).to_dict()
