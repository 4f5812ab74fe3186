"""``PreemptionCheckpoint``: on SIGTERM, finish the batch, write a checkpoint, and exit non-zero.

Composer's own SIGTERM handler exits at once (``sys.exit(143)`` from wherever the signal lands), losing
everything since the last checkpoint. This callback replaces it with the core's stop sequence
(``stream_plugin.preemption.PreemptionStop``, shared with the Lightning integration): the handler only
records the signal; at the end of a batch, about once a second and at most every batch, and at every
epoch's last batch, all ranks agree on it (one all-reduce, so ranks that got the signal at different
moments stop at the same batch), write a checkpoint through Composer's ``CheckpointSaver`` (which also
moves the ``latest`` symlink that ``autoresume`` reads), and exit with ``exit_code``. Running the same
command again (``run_name``, ``save_folder``, ``autoresume=True``) resumes there.

Every rank exits ``exit_code``: from the decision on, SIGTERM is ignored, so the launcher's clean-up
SIGTERM (``composer -n`` and torchrun send one to the ranks still running once one rank has exited)
cannot turn a rank's status into -15. ``composer -n`` then exits with the first non-zero rank status,
``exit_code``.
"""

from __future__ import annotations

import signal

from composer.callbacks import CheckpointSaver
from composer.core import Callback, State
from composer.loggers import Logger
from composer.utils import dist, format_name_with_dist

from stream_plugin.errors import ConfigError
from stream_plugin.preemption import DEFAULT_EXIT_CODE, PreemptionStop
from stream_plugin.redaction import get_logger

log = get_logger(__name__)

__all__ = ["DEFAULT_EXIT_CODE", "PreemptionCheckpoint"]


class PreemptionCheckpoint(Callback):
    """Turns SIGTERM into "finish this batch, checkpoint, exit ``exit_code``" (143 by default).

    Needs a checkpoint folder (``Trainer(save_folder=...)``). Registered for llm-foundry YAML as
    ``callbacks: {stream_plugin_preemption: {}}``. ``check_interval_s`` and ``check_every_n_steps``
    (batches) set when the ranks agree on the signal, as in ``stream_plugin.preemption.PreemptionStop``;
    ``check_interval_s: 0`` agrees after every batch.
    """

    def __init__(
        self,
        exit_code: int = DEFAULT_EXIT_CODE,
        check_interval_s: float = 1.0,
        check_every_n_steps: int | None = None,
    ) -> None:
        self._stop = PreemptionStop(
            [signal.SIGTERM],
            exit_code=exit_code,
            check_interval_s=check_interval_s,
            check_every_n_steps=check_every_n_steps,
        )

    @property
    def exit_code(self) -> int:
        return self._stop.exit_code

    # ------------------------------------------------------------------ events
    def init(self, state: State, logger: Logger) -> None:
        del state, logger
        self._stop.start()

    def fit_start(self, state: State, logger: Logger) -> None:
        del logger
        self._saver(state)  # fail before training, not at the first preemption
        self._stop.start()

    def batch_checkpoint(self, state: State, logger: Logger) -> None:
        timestamp = state.timestamp
        epoch_end = state.dataloader_len is not None and timestamp.batch_in_epoch >= state.dataloader_len
        signum = self._stop.signal_at(int(timestamp.batch), epoch_end=epoch_end)
        if not signum:
            return
        if state.max_duration is not None and timestamp >= state.max_duration:
            log.warning("preemption requested on the last batch; letting the run finish instead")
            return
        saver = self._saver(state)
        if saver.last_checkpoint_batch != timestamp.batch:
            saver._save_checkpoint(state, logger)  # noqa: SLF001 - the only path that also moves `latest`
        if saver.remote_uploader is not None:
            saver.remote_uploader.wait()  # the checkpoint must be in the bucket before we exit
        log.warning(
            "signal %d received; preempted at epoch %d, batch %d: checkpoint written; exiting with code %d. "
            "Run the same command again to resume",
            signum,
            int(timestamp.epoch),
            int(timestamp.batch),
            self.exit_code,
        )
        folder = format_name_with_dist(saver.folder, state.run_name)
        self._stop.exit(signum, folder, dist.barrier)  # no rank exits while another still writes

    def fit_end(self, state: State, logger: Logger) -> None:
        del state, logger
        self._stop.end()

    def close(self, state: State, logger: Logger) -> None:
        del state, logger
        self._stop.end()

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _saver(state: State) -> CheckpointSaver:
        for callback in state.callbacks:
            if isinstance(callback, CheckpointSaver):
                return callback
        raise ConfigError(
            "PreemptionCheckpoint: expected a checkpoint saver, found none; pass save_folder= (and, to "
            "resume by rerunning the same command, run_name= and autoresume=True) to the Trainer"
        )
