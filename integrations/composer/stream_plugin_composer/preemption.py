"""``PreemptionCheckpoint``: on SIGTERM, finish the batch, write a checkpoint, and exit non-zero.

Composer's own SIGTERM handler exits at once (``sys.exit(143)`` from wherever the signal lands), losing
everything since the last checkpoint. This callback replaces it with the core's ``PreemptionFlag``,
which only records the signal. At every batch boundary all ranks agree on the flag (``agree_on_signal``:
one all-reduce of one integer, so ranks that got the signal at different moments stop at the same
batch), write a checkpoint through Composer's ``CheckpointSaver`` (which also moves the ``latest`` symlink that ``autoresume`` reads), and exit with ``exit_code``.
Running the same command again (``run_name``, ``save_folder``, ``autoresume=True``) resumes there.

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
from composer.utils import dist

from stream_plugin.errors import ConfigError, check_int
from stream_plugin.preemption import DEFAULT_EXIT_CODE, PreemptionFlag, agree_on_signal
from stream_plugin.redaction import get_logger

log = get_logger(__name__)

__all__ = ["DEFAULT_EXIT_CODE", "PreemptionCheckpoint"]


class PreemptionCheckpoint(Callback):
    """Turns SIGTERM into "finish this batch, checkpoint, exit ``exit_code``" (143 by default).

    Needs a checkpoint folder (``Trainer(save_folder=...)``). Registered for llm-foundry YAML as
    ``callbacks: {stream_plugin_preemption: {}}``.
    """

    def __init__(self, exit_code: int = DEFAULT_EXIT_CODE) -> None:
        check_int(
            "PreemptionCheckpoint: exit_code",
            exit_code,
            minimum=1,
            maximum=255,
            fix="pass a non-zero exit code, so that schedulers see the job as interrupted",
        )
        self.exit_code = exit_code
        self._flag = PreemptionFlag([signal.SIGTERM])

    @property
    def requested(self) -> bool:
        """Whether this process has received SIGTERM since the handler was installed."""
        return bool(self._flag.received)

    def _install(self) -> None:
        if not self._flag.installed:
            self._flag.install()

    # ------------------------------------------------------------------ events
    def init(self, state: State, logger: Logger) -> None:
        del state, logger
        self._install()

    def fit_start(self, state: State, logger: Logger) -> None:
        del logger
        self._saver(state)  # fail before training, not at the first preemption
        self._install()

    def batch_checkpoint(self, state: State, logger: Logger) -> None:
        if not self._agreed():
            return
        if state.max_duration is not None and state.timestamp >= state.max_duration:
            log.warning("preemption requested on the last batch; letting the run finish instead")
            return
        saver = self._saver(state)
        if saver.last_checkpoint_batch != state.timestamp.batch:
            saver._save_checkpoint(state, logger)  # noqa: SLF001 - the only path that also moves `latest`
        if saver.remote_uploader is not None:
            saver.remote_uploader.wait()  # the checkpoint must be in the bucket before we exit
        dist.barrier()  # no rank exits while another still writes its part
        log.warning(
            "preempted at epoch %d, batch %d: checkpoint written; exiting with code %d. Run the same "
            "command again to resume",
            int(state.timestamp.epoch),
            int(state.timestamp.batch),
            self.exit_code,
        )
        self._flag.ignore_further()
        raise SystemExit(self.exit_code)

    def fit_end(self, state: State, logger: Logger) -> None:
        del state, logger
        self._flag.uninstall()

    def close(self, state: State, logger: Logger) -> None:
        del state, logger
        self._flag.uninstall()

    # ------------------------------------------------------------------ helpers
    def _agreed(self) -> bool:
        """True on every rank once any rank has been signalled."""
        signum = agree_on_signal(self._flag.received)
        if signum:
            log.warning("signal %d received; checkpointing and exiting after this batch", signum)
        return bool(signum)

    @staticmethod
    def _saver(state: State) -> CheckpointSaver:
        for callback in state.callbacks:
            if isinstance(callback, CheckpointSaver):
                return callback
        raise ConfigError(
            "PreemptionCheckpoint: expected a checkpoint saver, found none; pass save_folder= (and, to "
            "resume by rerunning the same command, run_name= and autoresume=True) to the Trainer"
        )
