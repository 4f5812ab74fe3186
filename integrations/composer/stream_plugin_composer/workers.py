"""DataLoader workers that survive a preemption SIGTERM sent to the whole process group.

``PreemptionCheckpoint`` lets the training process finish its batch and checkpoint; that only works if
its DataLoader workers are still there to deliver the batch.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
from collections.abc import Callable


def sigterm_guard_for_workers() -> Callable[[int], None]:
    """A DataLoader ``worker_init_fn`` that keeps workers alive through a preemption SIGTERM.

    A scheduler may signal the whole process group. A worker killed mid-epoch makes the training
    process fail (torch raises "DataLoader worker ... is killed by signal") before it can finish the
    batch and checkpoint, so workers ignore SIGTERM from anyone else. SIGTERM from the training process
    itself still ends them: that is how ``multiprocessing`` stops daemon workers at interpreter exit.
    Call it in the training process (it records that process's pid).
    """
    return functools.partial(_guard_worker_from_sigterm, parent_pid=os.getpid())


def _guard_worker_from_sigterm(worker_id: int, *, parent_pid: int) -> None:
    del worker_id
    if not hasattr(signal, "sigwaitinfo"):
        return  # macOS and Windows lack sigwaitinfo: workers keep the default SIGTERM behaviour there
    # Blocked before the dataset starts its threads in this worker: they inherit the mask, so only
    # the waiting thread below ever receives SIGTERM.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(
        target=_answer_sigterm, args=(parent_pid,), name="stream-plugin-sigterm", daemon=True
    ).start()


def _answer_sigterm(parent_pid: int) -> None:
    while True:
        received = signal.sigwaitinfo({signal.SIGTERM})
        if received.si_pid == parent_pid:
            os._exit(0)  # the training process stops this worker; exit 0 so torch reports no failure
