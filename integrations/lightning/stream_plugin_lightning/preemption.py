"""``PreemptionCheckpoint``: on SIGTERM (and SIGUSR1 on SLURM) finish the step, save atomically, exit 143.

Lightning 2.6 already reacts to SIGTERM, but its handler broadcasts a tensor from inside the signal
handler, stops on rank 0's signal only, saves nothing and exits 0, so schedulers think the job finished.
This callback replaces that handler while training runs. The handler only records the signal; at the
end of an optimizer step the ranks agree (an all-reduce every ``check_every_n_steps`` steps and at each
epoch end, never a collective per step) and then all stop at the same step: a full checkpoint is written
to a temporary file and renamed over ``last.ckpt``, and every rank raises ``Preempted`` (``SystemExit``).

Exit codes: ``exit_code`` (143 = 128 + SIGTERM) on every rank, except the child ranks that Lightning's
own DDP launcher started from the script (``strategy="ddp"`` without torchrun): they exit 0, because
Lightning's child-process observer SIGKILLs rank 0 when a child exits non-zero. Rank 0, whose status is
the job's, exits ``exit_code`` after those children are gone.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from stream_plugin.errors import ConfigError
from stream_plugin_lightning.checkpoints import save_checkpoint_atomically


class Preempted(SystemExit):
    """Raised on every rank once the preemption checkpoint is saved; ``code`` is this process's exit status."""

    def __init__(self, code: int, checkpoint: str, signum: int) -> None:
        super().__init__(code)
        self.checkpoint = checkpoint
        self.signum = signum

    def __str__(self) -> str:
        return f"preempted by {signal.Signals(self.signum).name}; checkpoint saved to {self.checkpoint}"


def on_slurm() -> bool:
    """Whether this process runs inside a SLURM job."""
    return "SLURM_JOB_ID" in os.environ


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
        check_every_n_steps: under DDP, how often the ranks compare notes (one small all-reduce); the stop
            comes at most this many optimizer steps after the signal. A single process checks every step.
        signals: signal numbers to trap; default SIGTERM, plus SIGUSR1 when running under SLURM.
        exit_code: the exit status after saving (143 = 128 + SIGTERM, what schedulers expect).
        requeue_on_slurm: after a SIGUSR1 under SLURM (the time-limit warning), run ``scontrol requeue``.
        child_exit_timeout: seconds rank 0 waits at exit for the child ranks Lightning launched.
    """

    def __init__(
        self,
        dirpath: str | None = None,
        filename: str = "last.ckpt",
        check_every_n_steps: int = 10,
        signals: Sequence[int] | None = None,
        exit_code: int = 143,
        requeue_on_slurm: bool = True,
        child_exit_timeout: float = 120.0,
    ) -> None:
        if (
            isinstance(check_every_n_steps, bool)
            or not isinstance(check_every_n_steps, int)
            or check_every_n_steps < 1
        ):
            raise ConfigError(f"check_every_n_steps: expected a positive int, found {check_every_n_steps!r}")
        if not filename or os.sep in filename:
            raise ConfigError(f"filename: expected a plain file name such as 'last.ckpt', found {filename!r}")
        if not 0 < exit_code < 256:
            raise ConfigError(
                f"exit_code: expected 1..255 so that the job counts as failed, found {exit_code}"
            )
        self.dirpath = dirpath
        self.filename = filename
        self.check_every_n_steps = check_every_n_steps
        self.signals = list(signals) if signals is not None else None
        self.exit_code = exit_code
        self.requeue_on_slurm = requeue_on_slurm
        self.child_exit_timeout = child_exit_timeout
        self._received: int = 0  # the signal number, 0 while none arrived
        self._previous_handlers: dict[int, Any] = {}
        self._last_step = -1

    # ------------------------------------------------------------------ signal handling
    def trapped_signals(self) -> list[int]:
        if self.signals is not None:
            return self.signals
        return [signal.SIGTERM, signal.SIGUSR1] if on_slurm() else [signal.SIGTERM]

    def _record(self, signum: int, frame: FrameType | None) -> None:
        # Only record: a handler runs between two bytecodes of the training loop, where I/O or a
        # collective could deadlock. The loop acts on it at the next check.
        if not self._received:
            self._received = signum

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            rank_zero_warn(
                "PreemptionCheckpoint: training runs outside the main thread; signals are not trapped"
            )
            return
        for signum in self.trapped_signals():
            self._previous_handlers[signum] = signal.getsignal(signum)
            signal.signal(signum, self._record)

    def _uninstall(self) -> None:
        for signum, handler in self._previous_handlers.items():
            if handler is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signum, handler)
        self._previous_handlers = {}

    # ------------------------------------------------------------------ hooks
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After the Trainer registered its own handlers (they are set just before the run starts).
        self._received = signal.SIGTERM if trainer.received_sigterm else 0
        self._last_step = trainer.global_step
        self._install()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step == self._last_step:
            return  # accumulating gradients: no optimizer step finished in this batch
        self._last_step = step
        if trainer.world_size > 1 and step % self.check_every_n_steps:
            return
        self._stop_if_signalled(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._stop_if_signalled(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._uninstall()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._uninstall()
        if isinstance(exception, SIGTERMException) and not isinstance(exception, Preempted):
            # A SIGTERM before training started went to Lightning's handler, which exits 0: make it fail.
            exception.code = self.exit_code

    # ------------------------------------------------------------------ stopping
    def _agreed_signal(self, trainer: pl.Trainer) -> int:
        """The signal any rank received (0 if none), the same on every rank."""
        if trainer.world_size == 1 or not (dist.is_available() and dist.is_initialized()):
            return self._received
        flag = torch.tensor([self._received], dtype=torch.int64, device=trainer.strategy.root_device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def _stop_if_signalled(self, trainer: pl.Trainer) -> None:
        signum = self._agreed_signal(trainer)
        if not signum:
            return
        path = self.checkpoint_path(trainer)
        save_checkpoint_atomically(trainer, path)
        rank_zero_info(
            f"PreemptionCheckpoint: {signal.Signals(signum).name} received; saved {path} at step "
            f"{trainer.global_step}; exiting with status {self.exit_code}"
        )
        if signum == signal.SIGUSR1 and on_slurm() and self.requeue_on_slurm and trainer.is_global_zero:
            self._requeue()
        code = 0 if self._launched_by_lightning(trainer) else self.exit_code
        self._wait_for_children_at_exit(trainer)
        raise Preempted(code, str(path), signum)

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

    @staticmethod
    def _launched_by_lightning(trainer: pl.Trainer) -> bool:
        """Whether this rank is a child process that Lightning's script launcher started on this node."""
        if trainer.world_size == 1 or not (dist.is_available() and dist.is_initialized()):
            return False
        launcher = trainer.strategy.launcher
        own = os.getpid() if getattr(launcher, "procs", None) else 0
        launchers: list[int] = [0] * trainer.world_size
        dist.all_gather_object(launchers, own)
        return os.getppid() in [pid for pid in launchers if pid]

    def _wait_for_children_at_exit(self, trainer: pl.Trainer) -> None:
        # At interpreter exit, after Lightning's exception handling (which may still need the children for
        # collectives in other callbacks' on_exception): then the job ends only when every rank has.
        procs: list[subprocess.Popen[Any]] = list(getattr(trainer.strategy.launcher, "procs", None) or [])
        if not procs:
            return
        timeout = self.child_exit_timeout

        def wait() -> None:
            for proc in procs:
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    rank_zero_warn(
                        f"PreemptionCheckpoint: rank process {proc.pid} still runs after {timeout}s"
                    )

        atexit.register(wait)
