"""``PreemptionCheckpoint``: on SIGTERM (and SIGUSR1 on SLURM) finish the step, save atomically, exit 143.

Lightning 2.6 already reacts to SIGTERM, but its handler broadcasts a tensor from inside the signal
handler, stops on rank 0's signal only, saves nothing and exits 0, so schedulers think the job finished.
This callback replaces that handler while training runs, with the core's stop sequence
(``stream_plugin.preemption.PreemptionStop``, shared with the Composer integration): the handler only
records the signal; at the end of an optimizer step, about once a second and at most every step, and at
every epoch's end, the ranks agree and then all stop at the same step: a full checkpoint is written to a
temporary file and renamed over ``last.ckpt``, and every rank raises ``Preempted`` (``SystemExit``).

Exit codes: ``exit_code`` (143 = 128 + SIGTERM) on every rank, under every launcher. Under Lightning's
own DDP launcher (``strategy="ddp"`` without torchrun) rank 0 first stands down Lightning's child-process
observer, which would otherwise SIGKILL every rank when a child exits non-zero, then exits after the
children it launched, so the job's status is known only when every rank has ended.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from stream_plugin.errors import ConfigError
from stream_plugin.preemption import DEFAULT_EXIT_CODE, Preempted, PreemptionStop
from stream_plugin_lightning.checkpoints import save_checkpoint_atomically

__all__ = ["Preempted", "PreemptionCheckpoint"]


class PreemptionCheckpoint(Callback):
    """Turn a preemption signal into an exact checkpoint and a non-zero exit, so the job restarts and resumes.

    Args:
        dirpath: where to write the checkpoint; default: the ``ModelCheckpoint``'s folder, else
            ``<default_root_dir>/checkpoints``. Restart with ``fit(ckpt_path="last")`` (which looks in the
            ``ModelCheckpoint`` folder) or ``fit(ckpt_path=latest_checkpoint(dirpath))``.
        filename: the checkpoint's file name; ``last.ckpt`` is what ``ckpt_path="last"`` finds.
        check_every_n_steps: under DDP, compare notes every this many optimizer steps (one small
            all-reduce) instead; the stop comes at most this many steps after the signal. Default: by
            time, see ``check_interval_s``. A single process checks every step.
        check_interval_s: without ``check_every_n_steps``, the ranks compare notes about every this many
            seconds and at most at every step (``stream_plugin.preemption.PreemptionStop``): steps
            longer than this agree at every step, and the stop comes within about this long plus one
            step of the signal. 0: every step.
        signals: signal numbers to trap; default SIGTERM, plus SIGUSR1 when running under SLURM.
        exit_code: every rank's exit status after saving (143 = 128 + SIGTERM, what schedulers expect).
        requeue_on_slurm: after a SIGUSR1 under SLURM (the time-limit warning), run ``scontrol requeue``.
        child_exit_timeout: seconds rank 0 waits at exit for the child ranks Lightning launched before it
            kills them.
    """

    def __init__(
        self,
        dirpath: str | None = None,
        filename: str = "last.ckpt",
        check_every_n_steps: int | None = None,
        check_interval_s: float = 1.0,
        signals: Sequence[int] | None = None,
        exit_code: int = DEFAULT_EXIT_CODE,
        requeue_on_slurm: bool = True,
        child_exit_timeout: float = 120.0,
    ) -> None:
        if not filename or os.sep in filename:
            raise ConfigError(f"filename: expected a plain file name such as 'last.ckpt', found {filename!r}")
        self._stop = PreemptionStop(
            signals,
            exit_code=exit_code,
            check_interval_s=check_interval_s,
            check_every_n_steps=check_every_n_steps,
            requeue_on_slurm=requeue_on_slurm,
        )
        self.dirpath = dirpath
        self.filename = filename
        self.child_exit_timeout = child_exit_timeout
        self._last_step = -1

    @property
    def exit_code(self) -> int:
        return self._stop.exit_code

    def trapped_signals(self) -> list[int]:
        return self._stop.signals

    # ------------------------------------------------------------------ hooks
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After the Trainer registered its own handlers (they are set just before the run starts).
        self._last_step = trainer.global_step
        if not self._stop.start(signal.SIGTERM if trainer.received_sigterm else 0):
            rank_zero_warn(
                "PreemptionCheckpoint: training runs outside the main thread; signals are not trapped"
            )

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step == self._last_step:
            return  # accumulating gradients: no optimizer step finished in this batch
        self._last_step = step
        self._stop_if_signalled(trainer, self._stop.signal_at(step, device=trainer.strategy.root_device))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        signum = self._stop.signal_at(
            trainer.global_step, epoch_end=True, device=trainer.strategy.root_device
        )
        self._stop_if_signalled(trainer, signum)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._stop.end()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._stop.end()
        if isinstance(exception, SIGTERMException) and not isinstance(exception, Preempted):
            # A SIGTERM before training started went to Lightning's handler, which exits 0: make it fail.
            exception.code = self.exit_code

    # ------------------------------------------------------------------ stopping
    def _stop_if_signalled(self, trainer: pl.Trainer, signum: int) -> None:
        """Save and stop every rank if ``signum`` (already agreed on) is not 0."""
        if not signum:
            return
        path = self.checkpoint_path(trainer)
        save_checkpoint_atomically(trainer, path)
        rank_zero_info(
            f"PreemptionCheckpoint: {signal.Signals(signum).name} received; saved {path} at step "
            f"{trainer.global_step}; every rank exits with status {self.exit_code}"
        )
        self._wait_for_children_at_exit(trainer)
        # No rank exits before rank 0 has stood Lightning's observer down (see the module docstring).
        self._stop.exit(
            signum,
            str(path),
            lambda: trainer.strategy.barrier("stream_plugin_lightning.PreemptionCheckpoint"),
        )

    def checkpoint_path(self, trainer: pl.Trainer) -> Path:
        """Where the preemption checkpoint goes (see ``dirpath``)."""
        if self.dirpath is not None:
            return Path(self.dirpath) / self.filename
        model_checkpoint = trainer.checkpoint_callback
        folder = getattr(model_checkpoint, "dirpath", None)
        if folder is None:
            folder = os.path.join(trainer.default_root_dir, "checkpoints")
        return Path(folder) / self.filename

    def _wait_for_children_at_exit(self, trainer: pl.Trainer) -> None:
        """In the rank that launched the others (Lightning's script launcher): let them exit non-zero, and
        end only after them.

        Lightning's child-process observer watches ``launcher.procs`` and SIGKILLs every rank, this one
        included, once a child exits non-zero; emptied, the list reads as "all finished" and the observer
        stops. The wait runs at interpreter exit, after Lightning's exception handling (other callbacks'
        ``on_exception`` may still need the children for collectives).
        """
        procs_list: list[subprocess.Popen[Any]] | None = getattr(trainer.strategy.launcher, "procs", None)
        if not procs_list:
            return
        procs = list(procs_list)
        procs_list.clear()
        timeout = self.child_exit_timeout

        def wait() -> None:
            for rank, proc in enumerate(procs, start=1):
                try:
                    status = proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    rank_zero_warn(
                        f"PreemptionCheckpoint: rank process {proc.pid} still runs after {timeout}s; killing it"
                    )
                    proc.kill()
                    status = proc.wait()
                rank_zero_info(f"PreemptionCheckpoint: local rank {rank} exited with status {status}")

        atexit.register(wait)
