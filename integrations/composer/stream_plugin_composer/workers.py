"""DataLoader workers that survive a preemption SIGTERM sent to the whole process group.

``PreemptionCheckpoint`` lets the training process finish its batch and checkpoint; that only works if
its DataLoader workers are still there to deliver the batch. The guard itself is the core's
``stream_plugin.preemption.WorkerSignalGuard``, shared with the Lightning integration.
"""

from __future__ import annotations

from collections.abc import Callable

from stream_plugin.preemption import WorkerSignalGuard


def sigterm_guard_for_workers() -> Callable[[int], None]:
    """A DataLoader ``worker_init_fn`` that keeps workers alive through a preemption SIGTERM.

    A scheduler may signal the whole process group. A worker killed mid-epoch makes the training
    process fail (torch raises "DataLoader worker ... is killed by signal") before it can finish the
    batch and checkpoint, so workers ignore SIGTERM (and SIGUSR1) from anyone else. SIGTERM from the
    training process itself still ends them: that is how ``multiprocessing`` stops daemon workers at
    interpreter exit.
    """
    return WorkerSignalGuard()
