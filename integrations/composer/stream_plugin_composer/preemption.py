"""``PreemptionCheckpoint``: on SIGTERM, finish the batch, write a checkpoint, and exit non-zero.

Composer's own SIGTERM handler exits at once (``sys.exit(143)`` from wherever the signal lands), losing
everything since the last checkpoint. This callback replaces it with one that only raises a flag. At the
next batch boundary all ranks agree on the flag (one tiny all-reduce, so ranks that got the signal at
different moments stop at the same batch), write a checkpoint through Composer's ``CheckpointSaver``
(which also moves the ``latest`` symlink that ``autoresume`` reads), and exit with ``exit_code``.
Running the same command again (``run_name``, ``save_folder``, ``autoresume=True``) resumes there.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

import torch
from composer.callbacks import CheckpointSaver
from composer.core import Callback, State
from composer.loggers import Logger
from composer.utils import dist

from stream_plugin.errors import ConfigError

log = logging.getLogger(__name__)

# 128 + SIGTERM: what a shell reports for a process ended by SIGTERM, and what Composer itself uses.
DEFAULT_EXIT_CODE = 128 + int(signal.SIGTERM)

_Handler = Any  # what signal.getsignal returns: a callable, SIG_DFL, SIG_IGN or None


class PreemptionCheckpoint(Callback):
    """Turns SIGTERM into "finish this batch, checkpoint, exit ``exit_code``" (143 by default).

    Needs a checkpoint folder (``Trainer(save_folder=...)``). Registered for llm-foundry YAML as
    ``callbacks: {stream_plugin_preemption: {}}``.
    """

    def __init__(self, exit_code: int = DEFAULT_EXIT_CODE) -> None:
        if isinstance(exit_code, bool) or not isinstance(exit_code, int) or not 1 <= exit_code <= 255:
            raise ConfigError(
                f"PreemptionCheckpoint: expected exit_code in 1..255 (non-zero, so schedulers see the job "
                f"as interrupted), found {exit_code!r}"
            )
        self.exit_code = exit_code
        self._requested = threading.Event()
        self._previous: _Handler = None
        self._installed = False

    # ------------------------------------------------------------------ signal handling
    @property
    def requested(self) -> bool:
        """Whether this process has received SIGTERM since the handler was installed."""
        return self._requested.is_set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        del frame
        # Only a flag: the handler runs between two bytecodes of the training step.
        self._requested.set()
        log.warning("received signal %d; will checkpoint and exit after the current batch", signum)

    def _install(self) -> None:
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        self._installed = True

    def _ignore_further_sigterm(self) -> None:
        """From here on SIGTERM is ignored, through interpreter shutdown.

        When one rank exits, the ``composer`` launcher SIGTERMs the others. They are exiting too, but
        Python resets its own handlers to the default at shutdown, and a SIGTERM then would kill the rank
        (code -15, which the launcher reports instead of ours). SIG_IGN survives the shutdown.
        """
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._installed = False

    def _uninstall(self) -> None:
        if not self._installed or threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)
        self._installed = False

    # ------------------------------------------------------------------ events
    def init(self, state: State, logger: Logger) -> None:
        del state, logger
        self._install()

    def fit_start(self, state: State, logger: Logger) -> None:
        del logger
        self._saver(state)  # fail before training, not at the first preemption
        self._install()

    def batch_checkpoint(self, state: State, logger: Logger) -> None:
        if not self._agreed(state):
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
        self._ignore_further_sigterm()
        raise SystemExit(self.exit_code)

    def fit_end(self, state: State, logger: Logger) -> None:
        del state, logger
        self._uninstall()

    def close(self, state: State, logger: Logger) -> None:
        del state, logger
        self._uninstall()

    # ------------------------------------------------------------------ helpers
    def _agreed(self, state: State) -> bool:
        """True on every rank once any rank has been signalled."""
        flag = torch.tensor([1 if self.requested else 0], dtype=torch.uint8)
        flag = state.device.tensor_to_device(flag)
        dist.all_reduce(flag, reduce_operation="MAX")
        return bool(flag.item())

    @staticmethod
    def _saver(state: State) -> CheckpointSaver:
        for callback in state.callbacks:
            if isinstance(callback, CheckpointSaver):
                return callback
        raise ConfigError(
            "PreemptionCheckpoint: expected a checkpoint saver, found none; pass save_folder= (and, to "
            "resume by rerunning the same command, run_name= and autoresume=True) to the Trainer"
        )
