"""Helpers that make "run the same command again" work for Composer's ``autoresume``.

Two situations break a plain rerun in Composer 0.32.1:

- A run that already reached ``max_duration`` raises ``ValueError`` from ``Trainer.fit`` ("The
  max_duration (...) is less than or equal to the elapsed training duration"). ``run_is_complete`` lets
  a script report it and exit 0 instead; ``ExitIfComplete`` does the same from inside the Trainer, for
  scripts one cannot change (llm-foundry's ``train.py``: ``callbacks: {stream_plugin_exit_if_complete: {}}``).
- A process killed while writing a checkpoint leaves a file newer than the one the ``latest`` symlink
  points to (Composer writes the file, then moves the symlink, and does not write atomically). On the
  rerun ``CheckpointSaver`` refuses to start (``FileExistsError``: it "may conflict with a future
  checkpoint"). ``set_aside_unfinished_checkpoints`` renames such files out of the way first.
"""

from __future__ import annotations

from pathlib import Path

from composer.core import Callback, State, TimeUnit
from composer.loggers import Logger
from composer.utils import dist

from stream_plugin.redaction import get_logger

log = get_logger(__name__)

UNFINISHED_PREFIX = ".unfinished-"


def run_is_complete(state: State) -> bool:
    """True when the (possibly just autoresumed) timestamp has reached ``max_duration``.

    A checkpoint written at the last batch's ``BATCH_CHECKPOINT`` (a batch or sample save interval that
    lands on the end) still says ``epoch = max - 1`` with every batch of that epoch done: Composer
    counts it as one epoch short, although no batch is left. That run is complete too.
    """
    duration = state.max_duration
    if duration is None:
        return False
    timestamp = state.timestamp
    if timestamp.get(duration.unit) >= duration:
        return True
    epoch_done = state.dataloader_len is not None and timestamp.batch_in_epoch >= state.dataloader_len
    return duration.unit == TimeUnit.EPOCH and epoch_done and int(timestamp.epoch) + 1 >= duration.value


def set_aside_unfinished_checkpoints(
    folder: str | Path, latest_filename: str = "latest-rank0.pt", suffix: str = ".pt"
) -> list[Path]:
    """Rename checkpoint files newer than ``latest``'s target to ``.unfinished-<name>``; return them.

    Call it on global rank 0, before building the ``Trainer``, for a local ``save_folder`` with
    monolithic (unsharded) checkpoints. Without a ``latest`` symlink no checkpoint was ever completed,
    so every checkpoint file is set aside. Nothing is deleted: the hidden names only keep Composer's
    conflict check from matching them.
    """
    root = Path(folder)
    if not root.is_dir():
        return []
    latest = root / latest_filename
    target = latest.resolve() if latest.is_symlink() and latest.exists() else None
    cutoff = target.stat().st_mtime_ns if target is not None else None
    moved: list[Path] = []
    for path in sorted(root.iterdir()):
        if path.name.startswith(".") or path.is_symlink() or not path.is_file() or path.suffix != suffix:
            continue
        if path == target or (cutoff is not None and path.stat().st_mtime_ns <= cutoff):
            continue
        destination = path.with_name(UNFINISHED_PREFIX + path.name)
        path.rename(destination)
        log.warning("set aside %s: newer than the latest completed checkpoint (a save cut short)", path)
        moved.append(destination)
    return moved


class ExitIfComplete(Callback):
    """Makes rerunning a finished run a no-op: exits 0 right after autoresume loaded a checkpoint that
    already reached ``max_duration``, before ``Trainer.fit`` would raise.

    Registered for llm-foundry YAML as ``callbacks: {stream_plugin_exit_if_complete: {}}``. Every rank
    loads the same checkpoint, so every rank decides the same and they leave together.
    """

    def after_load(self, state: State, logger: Logger) -> None:
        del logger
        if not run_is_complete(state):
            return
        log.warning(
            "run %r is already complete (%s of max_duration %s trained); nothing to do, exiting with code 0",
            state.run_name,
            state.timestamp.get(state.max_duration.unit) if state.max_duration is not None else "?",
            state.max_duration,
        )
        dist.barrier()
        raise SystemExit(0)
