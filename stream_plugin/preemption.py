"""Preemption, shared by the Lightning and Composer integrations: a signal flag, the cross-rank
agreement on it, and a DataLoader ``worker_init_fn`` that keeps workers alive through the signal.

A scheduler preempts a job by sending SIGTERM (SLURM first sends SIGUSR1 with ``--signal``), then
SIGKILL after a grace period. Training survives only if three things hold:

1. The handler only records the signal (``PreemptionFlag``). It runs between two bytecodes of the
   training step, where I/O, logging or a collective could deadlock; the loop acts at a step boundary.
2. All ranks stop at the same step (``agree_on_signal``). Ranks get the signal at different moments,
   or only one of them gets it (Kubernetes signals the main process); a MAX all-reduce of the flag at
   each step boundary gives every rank the same answer, so they checkpoint the same step together.
3. DataLoader workers outlive a signal sent to the whole process group (``WorkerSignalGuard``). A worker
   killed mid-epoch makes the training process fail at its next batch, before it can checkpoint.

``PreemptionStop`` is the one stop sequence both integrations' ``PreemptionCheckpoint`` callbacks run:
trap the signals, agree on them at step boundaries on one schedule, and once any rank was signalled
(after the integration saved its checkpoint) wait for every rank, ignore further signals and raise
``Preempted``. The integrations add only what their trainer decides: where a step ends and how a
checkpoint is saved.

``torch`` is imported only inside functions that need it: ``import stream_plugin.preemption`` stays light.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from stream_plugin.collectives import distributed, max_over_ranks
from stream_plugin.errors import ConfigError, check_int

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_EXIT_CODE",
    "AgreementSchedule",
    "Preempted",
    "PreemptionFlag",
    "PreemptionStop",
    "WorkerSignalGuard",
    "agree_on_signal",
    "default_preemption_signals",
    "on_slurm",
]

# 128 + SIGTERM: what a shell reports for a process ended by SIGTERM, and what schedulers expect.
DEFAULT_EXIT_CODE = 128 + int(signal.SIGTERM)

_Handler = Any  # what signal.getsignal returns: a callable, SIG_DFL, SIG_IGN or None


def on_slurm() -> bool:
    """Whether this process runs inside a SLURM job."""
    return "SLURM_JOB_ID" in os.environ


def default_preemption_signals() -> list[int]:
    """SIGTERM, plus SIGUSR1 under SLURM (the time-limit warning of ``sbatch --signal=USR1@90``)."""
    return [signal.SIGTERM, signal.SIGUSR1] if on_slurm() else [signal.SIGTERM]


class PreemptionFlag:
    """Records the first preemption signal this process receives; nothing else happens in the handler.

    ``install`` replaces the handlers of ``signals`` (main thread only: Python delivers signals there)
    and ``uninstall`` puts the previous ones back. ``received`` is the signal number, 0 while none came.
    """

    def __init__(self, signals: Sequence[int] | None = None) -> None:
        self.signals: list[int] = list(signals) if signals is not None else default_preemption_signals()
        self._received = 0
        self._previous: dict[int, _Handler] = {}

    @property
    def received(self) -> int:
        """The first signal received since the flag was made or cleared (0: none)."""
        return self._received

    def record(self, signum: int) -> None:
        """Record ``signum`` as if it had arrived (a signal an earlier handler caught, for example)."""
        if not self._received:
            self._received = int(signum)

    def clear(self) -> None:
        self._received = 0

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> bool:
        """Trap ``signals``; False (and nothing changed) outside the main thread, where Python cannot."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for signum in self.signals:
            previous = signal.signal(signum, self._handle)
            self._previous.setdefault(signum, previous)
        return True

    def uninstall(self) -> None:
        """Put back the handlers that ``install`` replaced."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}

    def ignore_further(self) -> None:
        """Ignore ``signals`` from now on, through interpreter shutdown.

        Once a rank has decided to exit, a launcher that saw another rank exit first SIGTERMs it
        (``composer -n``, torchrun). Python puts the default handler back while it shuts down, and a
        SIGTERM then would end the rank with -15 instead of the exit code; SIG_IGN survives shutdown.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.signals:
            signal.signal(signum, signal.SIG_IGN)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        del frame
        self.record(signum)


def agree_on_signal(received: int, device: torch.device | str | None = None) -> int:
    """The signal any rank received (0 if none), the same on every rank: one MAX all-reduce.

    Collective: every rank of the default process group must call it at the same step. Without an
    initialised process group it returns ``received``. ``device`` holds the one-element tensor; by default
    the current CUDA device under NCCL, else the CPU.
    """
    return max_over_ranks([received], device)[0]


class AgreementSchedule:
    """At which steps the ranks agree: about every ``check_interval_s`` seconds, at most every step.

    Each agreement also carries the slowest rank's time since the previous one (in the same all-reduce),
    so every rank computes the same next step to agree at, without another collective: steps longer than
    ``check_interval_s`` agree at every step, shorter ones every ``check_interval_s / step time`` steps
    (0: every step). A preemption is then answered within about ``check_interval_s`` plus one step, at a
    cost of one small all-reduce per ``check_interval_s``. With ``every_n_steps`` the ranks agree at the
    steps divisible by it instead, and the stop comes at most that many steps after the signal.
    ``step`` must count the same on every rank (an optimizer step or a batch counter).
    """

    def __init__(self, check_interval_s: float = 1.0, every_n_steps: int | None = None) -> None:
        seconds = check_interval_s
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
            raise ConfigError(
                f"check_interval_s: expected seconds >= 0 between agreements (0: every step), found {seconds!r}"
            )
        self.check_interval_s = float(seconds)
        self.every_n_steps = check_int("check_every_n_steps", every_n_steps, minimum=1, allow_none=True)
        self._next_step: int | None = None
        self._last_step = 0
        self._last_time = 0.0

    def due(self, step: int) -> bool:
        """Whether the ranks agree at ``step`` (by time: the first call's step always is)."""
        if self.every_n_steps is not None:
            return step % self.every_n_steps == 0
        return self._next_step is None or step >= self._next_step

    def agree(self, step: int, received: int, device: torch.device | str | None = None) -> int:
        """``agree_on_signal`` that also plans the next step to agree at; collective, call when ``due``."""
        now = time.monotonic()
        elapsed_us = 0 if self._next_step is None else int((now - self._last_time) * 1e6)
        signum, slowest_us = max_over_ranks([received, elapsed_us], device)
        steps = step - self._last_step
        if self._next_step is None or slowest_us <= 0 or steps <= 0:
            self._next_step = step + 1
        else:
            per_step_s = slowest_us / 1e6 / steps
            self._next_step = step + max(1, int(self.check_interval_s / per_step_s))
        self._last_step, self._last_time = step, now
        return signum


class Preempted(SystemExit):
    """Raised on every rank once the preemption checkpoint is saved; ``code`` is this process's exit status."""

    def __init__(self, code: int, checkpoint: str, signum: int) -> None:
        super().__init__(code)
        self.checkpoint = checkpoint
        self.signum = signum

    def __str__(self) -> str:
        return f"preempted by {signal.Signals(self.signum).name}; checkpoint saved to {self.checkpoint}"


class PreemptionStop:
    """The stop sequence of both integrations' ``PreemptionCheckpoint``: trap, agree, save, exit.

    1. ``start`` traps ``signals`` (the handler only records them: ``PreemptionFlag``); ``end`` puts
       the previous handlers back and forgets what was received.
    2. At every step boundary of the training loop ``signal_at(step)`` answers the signal any rank
       received, the same on every rank (0: go on); ``epoch_end=True`` at the last step of an epoch.
    3. Given a signal, the integration saves its checkpoint on every rank, then calls ``exit``: under
       SLURM a SIGUSR1 (the time-limit warning) requeues the job from rank 0 when ``requeue_on_slurm``;
       every rank waits for the others (``barrier``: no rank exits while another still writes), ignores
       the signals through interpreter shutdown (a launcher's clean-up SIGTERM would turn the status into
       -15), destroys the default process group at interpreter exit when nothing else has (a gloo group
       left to the interpreter's teardown can abort the process: status -6, "terminate called without
       an active exception") and raises ``Preempted(exit_code)``.

    The one agreement schedule: a single process reads its own flag at every step (no collective).
    Ranks of a process group agree, by one MAX all-reduce, at the first step, then about every
    ``check_interval_s`` seconds and at most every step (``AgreementSchedule``), or at the steps
    divisible by ``check_every_n_steps`` when given; and always at an epoch's last step, so that a signal
    is answered before evaluation or the next epoch's start. By time rather than at every step because
    an all-reduce after each step costs 2 to 6 ms, +10 to 22 % of a small model's DDP step
    (benchmarks/RESULTS.md, "Preemption agreement"), while schedulers give tens of seconds of grace:
    about one second plus one step answers well within it, at one all-reduce a second whatever the step.
    """

    def __init__(
        self,
        signals: Sequence[int] | None = None,
        *,
        exit_code: int = DEFAULT_EXIT_CODE,
        check_interval_s: float = 1.0,
        check_every_n_steps: int | None = None,
        requeue_on_slurm: bool = True,
    ) -> None:
        self.exit_code = check_int(
            "PreemptionCheckpoint: exit_code",
            exit_code,
            minimum=1,
            maximum=255,
            fix="pass a non-zero exit code, so that schedulers see the job as interrupted",
        )
        self.signals = list(signals) if signals is not None else default_preemption_signals()
        self.check_interval_s = check_interval_s
        self.check_every_n_steps = check_every_n_steps
        self.requeue_on_slurm = requeue_on_slurm
        self.flag = PreemptionFlag(self.signals)
        self.schedule = AgreementSchedule(check_interval_s, check_every_n_steps)

    def start(self, received: int = 0) -> bool:
        """Trap the signals unless they are trapped already; ``received``: a signal an earlier handler
        caught. False (nothing trapped) outside the main thread."""
        if received:
            self.flag.record(received)
        return self.flag.installed or self.flag.install()

    def end(self) -> None:
        """Put the previous handlers back, forget any signal received and start the schedule afresh."""
        self.flag.uninstall()
        self.flag.clear()
        self.schedule = AgreementSchedule(self.check_interval_s, self.check_every_n_steps)

    def signal_at(
        self, step: int, *, epoch_end: bool = False, device: torch.device | str | None = None
    ) -> int:
        """The signal any rank received (0: none), at a step boundary; collective on the steps the
        schedule picks, so every rank calls it at every step, with the same ``step`` and ``epoch_end``."""
        if not distributed():
            return self.flag.received
        if epoch_end:
            return agree_on_signal(self.flag.received, device)
        if not self.schedule.due(step):
            return 0
        return self.schedule.agree(step, self.flag.received, device)

    def exit(self, signum: int, checkpoint: str, barrier: Callable[[], None]) -> NoReturn:
        """After the checkpoint is saved: requeue, wait for every rank (``barrier``), raise ``Preempted``."""
        if signum == signal.SIGUSR1 and self.requeue_on_slurm and on_slurm() and _rank() == 0:
            _requeue_slurm_job()
        barrier()
        self.flag.ignore_further()
        atexit.register(self.flag.ignore_further)  # the trainer's teardown may put handlers back
        atexit.register(destroy_default_group)  # after the trainer's teardown, which may still use it
        raise Preempted(self.exit_code, checkpoint, signum)


def destroy_default_group() -> None:
    """Destroy the default process group if one is still up: at exit, while the interpreter can still
    run torch's clean-up (every rank passed the stop's barrier, so no collective is pending)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _slurm_job_id() -> str:
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None:
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ["SLURM_JOB_ID"]


def _requeue_slurm_job() -> None:
    """``scontrol requeue`` this SLURM job (an array job's own task); a failure warns, it does not raise."""
    job = _slurm_job_id()
    result = subprocess.run(["scontrol", "requeue", job], check=False)
    if result.returncode:
        # A warning, not a log record: it shows without logging configured, and a job not requeued
        # will not restart.
        warnings.warn(
            f"PreemptionCheckpoint: `scontrol requeue {job}` failed with status {result.returncode}; "
            "the job will not restart by itself: requeue or resubmit it",
            stacklevel=3,
        )


class WorkerSignalGuard:
    """A DataLoader ``worker_init_fn``: workers outlive preemption signals sent to the process group.

    A scheduler or shell that signals the whole process group (SLURM, ``kill -TERM -PGID``) also hits
    the DataLoader workers, which die on SIGTERM and SIGUSR1 by default; the training process then fails
    at its next batch ("DataLoader worker ... is killed by signal") before it can checkpoint. In each
    worker the guard blocks ``signals`` and a thread takes them with ``sigwaitinfo``: a SIGTERM from the
    training process itself ends the worker with status 0 (that is how ``multiprocessing`` stops
    workers still alive at interpreter exit, so nothing hangs); every other one is dropped. The training
    process decides when to stop and shuts its workers down; a worker whose parent dies exits on its own
    (PyTorch's watchdog). Then ``user_init(worker_id)`` runs, if given.

    The signals are blocked before the dataset or ``user_init`` start threads, which inherit the mask,
    so only the waiting thread receives them. A signal that reaches a worker while it starts, before
    its ``worker_init_fn`` runs, still ends it. Without ``sigwaitinfo`` (macOS, Windows) workers keep the
    default behaviour. A class, not a closure, so that it pickles for the ``spawn`` start method.
    """

    def __init__(
        self,
        user_init: Callable[[int], None] | None = None,
        signals: Sequence[int] = (signal.SIGTERM, signal.SIGUSR1),
    ) -> None:
        self.user_init = user_init
        self.signals = tuple(int(signum) for signum in signals)

    def __call__(self, worker_id: int) -> None:
        if hasattr(signal, "sigwaitinfo"):
            signal.pthread_sigmask(signal.SIG_BLOCK, set(self.signals))
            threading.Thread(
                target=_answer_signals,
                args=(self.signals, _training_process_pid()),
                name="stream-plugin-worker-signals",
                daemon=True,
            ).start()
        if self.user_init is not None:
            self.user_init(worker_id)


def _training_process_pid() -> int:
    # The process that started this worker, whatever the start method (a forkserver worker's OS
    # parent is the fork server, not the training process).
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and parent.pid is not None else os.getppid()


def _answer_signals(signals: tuple[int, ...], parent_pid: int) -> None:
    while True:
        received = signal.sigwaitinfo(set(signals))
        if received.si_signo == signal.SIGTERM and received.si_pid == parent_pid:
            os._exit(0)  # the training process stops this worker; exit 0 so torch reports no failure
