"""``PreemptionCheckpoint``: on SIGTERM (and SIGUSR1 on SLURM) the Trainer saves ``checkpoint-N`` at the
next step boundary and every rank exits with 143, so rerunning the same command resumes.

The stop sequence is the core's (``stream_plugin.preemption.PreemptionStop``, shared with the Lightning
and Composer integrations): the handler only records the signal; at the end of each optimizer step the
ranks agree on it (about once a second, and at every epoch's end); given a signal the callback asks the
Trainer to save and stop, and once the Trainer has saved (and ``DataStateCheckpoint`` has written the
data position) every rank waits for the others and raises ``Preempted``.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.utils import logging

from stream_plugin.preemption import DEFAULT_EXIT_CODE, Preempted, PreemptionStop
from stream_plugin_transformers.data_state import checkpoint_folder

__all__ = ["Preempted", "PreemptionCheckpoint"]

_log = logging.get_logger(__name__)


class PreemptionCheckpoint(TrainerCallback):
    """Turn a preemption signal into the Trainer's own checkpoint and a non-zero exit.

    Use it with ``StreamingTrainer`` (whose ``DataStateCheckpoint`` must run first, as it does when this
    callback is passed in ``callbacks=``) and resume with
    ``train(resume_from_checkpoint=latest_checkpoint(output_dir))``.

    Args:
        check_every_n_steps: ranks agree every this many optimizer steps instead of by time.
        check_interval_s: without ``check_every_n_steps``, ranks agree about this often (0: every step).
        signals: signals to trap; default SIGTERM, plus SIGUSR1 under SLURM.
        exit_code: every rank's exit status after saving (143 = 128 + SIGTERM).
        requeue_on_slurm: after a SIGUSR1 under SLURM, ``scontrol requeue`` the job.
    """

    def __init__(
        self,
        check_every_n_steps: int | None = None,
        check_interval_s: float = 1.0,
        signals: Sequence[int] | None = None,
        exit_code: int = DEFAULT_EXIT_CODE,
        requeue_on_slurm: bool = True,
    ) -> None:
        self._stop = PreemptionStop(
            signals,
            exit_code=exit_code,
            check_interval_s=check_interval_s,
            check_every_n_steps=check_every_n_steps,
            requeue_on_slurm=requeue_on_slurm,
        )
        self._signum = 0

    @property
    def exit_code(self) -> int:
        return self._stop.exit_code

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._signum = 0
        if not self._stop.start():
            _log.warning(
                "PreemptionCheckpoint: training runs outside the main thread; signals are not trapped"
            )

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._save_and_stop_if_signalled(control, self._stop.signal_at(state.global_step))

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if not self._signum:
            self._save_and_stop_if_signalled(control, self._stop.signal_at(state.global_step, epoch_end=True))

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if not self._signum:
            return
        folder = checkpoint_folder(args.output_dir, state.global_step)
        _log.warning(
            f"PreemptionCheckpoint: {signal.Signals(self._signum).name} received; saved {folder}; every rank "
            f"exits with status {self.exit_code}"
        )
        self._stop.exit(self._signum, str(folder), _barrier)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._stop.end()

    def _save_and_stop_if_signalled(self, control: TrainerControl, signum: int) -> None:
        if signum:
            self._signum = signum
            control.should_save = True
            control.should_training_stop = True


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
