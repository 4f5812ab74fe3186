"""``PreemptionCheckpoint``: on SIGTERM (and SIGUSR1 on SLURM) finish the step, save atomically, exit 143.

Lightning 2.6 already reacts to SIGTERM, but its handler broadcasts a tensor from inside the signal
handler, stops on rank 0's signal only, saves nothing and exits 0, so schedulers think the job finished.
This callback replaces that handler while training runs, with the core's ``PreemptionFlag`` (the handler
only records the signal). At the end of an optimizer step, about once a second and at most every step
(``AgreementSchedule``: one small all-reduce, measured in benchmarks/RESULTS.md, "Preemption
agreement"), the ranks agree and then all stop at the same step: a full checkpoint is written to a temporary file and renamed over ``last.ckpt``, and
every rank raises ``Preempted`` (``SystemExit``).

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

from stream_plugin.errors import ConfigError, check_int
from stream_plugin.preemption import (
    AgreementSchedule,
    PreemptionFlag,
    agree_on_signal,
    default_preemption_signals,
    on_slurm,
)
from stream_plugin_lightning.checkpoints import save_checkpoint_atomically


class Preempted(SystemExit):
    """Raised on every rank once the preemption checkpoint is saved; ``code`` is this process's exit status."""

    def __init__(self, code: int, checkpoint: str, signum: int) -> None:
        super().__init__(code)
        self.checkpoint = checkpoint
        self.signum = signum

    def __str__(self) -> str:
        return f"preempted by {signal.Signals(self.signum).name}; checkpoint saved to {self.checkpoint}"


def _slurm_job_id() -> str:
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None:
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ["SLURM_JOB_ID"]


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
            seconds and at most at every step (``stream_plugin.preemption.AgreementSchedule``): steps
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
        exit_code: int = 143,
        requeue_on_slurm: bool = True,
        child_exit_timeout: float = 120.0,
    ) -> None:
        check_int("check_every_n_steps", check_every_n_steps, minimum=1, allow_none=True)
        if not filename or os.sep in filename:
            raise ConfigError(f"filename: expected a plain file name such as 'last.ckpt', found {filename!r}")
        if not 0 < exit_code < 256:
            raise ConfigError(
                f"exit_code: expected 1..255 so that the job counts as failed, found {exit_code}"
            )
        self.dirpath = dirpath
        self.filename = filename
        self.check_every_n_steps = check_every_n_steps
        self.check_interval_s = check_interval_s
        self._schedule = AgreementSchedule(check_interval_s)
        self.signals = list(signals) if signals is not None else None
        self.exit_code = exit_code
        self.requeue_on_slurm = requeue_on_slurm
        self.child_exit_timeout = child_exit_timeout
        self._flag = PreemptionFlag(self.trapped_signals())
        self._last_step = -1

    # ------------------------------------------------------------------ signal handling
    def trapped_signals(self) -> list[int]:
        if self.signals is not None:
            return self.signals
        return default_preemption_signals()

    # ------------------------------------------------------------------ hooks
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After the Trainer registered its own handlers (they are set just before the run starts).
        self._flag = PreemptionFlag(self.trapped_signals())
        if trainer.received_sigterm:
            self._flag.record(signal.SIGTERM)
        self._last_step = trainer.global_step
        self._schedule = AgreementSchedule(self.check_interval_s)
        if not self._flag.install():
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
        if trainer.world_size == 1:
            self._stop_if_signalled(trainer, self._flag.received)
        elif self.check_every_n_steps is not None:
            if step % self.check_every_n_steps == 0:
                self._stop_if_signalled(trainer, self._agreed_signal(trainer))
        elif self._schedule.due(step):
            device = trainer.strategy.root_device
            self._stop_if_signalled(trainer, self._schedule.agree(step, self._flag.received, device))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._stop_if_signalled(trainer, self._agreed_signal(trainer))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._flag.uninstall()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._flag.uninstall()
        if isinstance(exception, SIGTERMException) and not isinstance(exception, Preempted):
            # A SIGTERM before training started went to Lightning's handler, which exits 0: make it fail.
            exception.code = self.exit_code

    # ------------------------------------------------------------------ stopping
    def _agreed_signal(self, trainer: pl.Trainer) -> int:
        """The signal any rank received (0 if none), the same on every rank."""
        if trainer.world_size == 1:
            return self._flag.received
        return agree_on_signal(self._flag.received, device=trainer.strategy.root_device)

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
        if signum == signal.SIGUSR1 and on_slurm() and self.requeue_on_slurm and trainer.is_global_zero:
            self._requeue()
        self._wait_for_children_at_exit(trainer)
        # No rank exits before rank 0 has stood Lightning's observer down (see the module docstring).
        trainer.strategy.barrier("stream_plugin_lightning.PreemptionCheckpoint")
        self._ignore_signals_until_exit()
        raise Preempted(self.exit_code, str(path), signum)

    def _ignore_signals_until_exit(self) -> None:
        """Keep a launcher's clean-up SIGTERM from turning this rank's status into -15.

        torchrun SIGTERMs the ranks still running once one has exited, and this rank may still be in
        Lightning's teardown (which stops the DataLoader workers) or in interpreter shutdown. Ignored from
        here; Lightning's teardown then puts back the handlers from before ``fit``, so the interpreter's
        exit ignores them again.
        """
        self._flag.ignore_further()
        atexit.register(self._flag.ignore_further)

    def checkpoint_path(self, trainer: pl.Trainer) -> Path:
        """Where the preemption checkpoint goes (see ``dirpath``)."""
        if self.dirpath is not None:
            return Path(self.dirpath) / self.filename
        model_checkpoint = trainer.checkpoint_callback
        folder = getattr(model_checkpoint, "dirpath", None)
        if folder is None:
            folder = os.path.join(trainer.default_root_dir, "checkpoints")
        return Path(folder) / self.filename

    def _requeue(self) -> None:
        job = _slurm_job_id()
        result = subprocess.run(["scontrol", "requeue", job], check=False)
        if result.returncode:
            rank_zero_warn(
                f"PreemptionCheckpoint: `scontrol requeue {job}` failed with status {result.returncode}"
            )

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
