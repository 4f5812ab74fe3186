"""The iterator of a loader's pass: torch's own, or one that hands batches over faster (see the package)."""

from __future__ import annotations

import weakref
from typing import Any

from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from stream_plugin.reading.torch_internals.gate import torch_iterator_reason
from stream_plugin.reading.torch_internals.worker_pipes import (
    RESULT_PIPE_BYTES,
    PipedWorkersIterator,
    pins_memory,
    pipes_fit,
    set_pipe_size,
)
from stream_plugin.reading.transport import PackedCollate, SharedRegion


def make_iterator(loader: DataLoader) -> Any:
    """The iterator for ``loader``'s next pass, as ``DataLoader.__iter__`` returns it (live persistent
    workers serve it again).

    With workers, on a checked torch and unless the user chose torch's own iterator
    (``gate.torch_iterator_reason``): a pipe per worker each way where they are forked and the dataset is
    iterable (``worker_pipes.PipedWorkersIterator``), else torch's, its workers' result pipe widened to
    carry a whole batch in one write (``widen_result_pipe``); and where the workers are forked and
    torch does not pin batches in a thread of its own, a ``transport.SharedRegion`` for large batches,
    made for this iterator and unmapped with it. Otherwise torch's own ``DataLoader.__iter__``.
    """
    if not loader.num_workers or torch_iterator_reason(loader) is not None:
        return DataLoader.__iter__(loader)
    if loader.persistent_workers:
        if loader._iterator is None:
            loader._iterator = _new_iterator(loader)
        else:
            loader._iterator._reset(loader)
        return loader._iterator
    return _new_iterator(loader)


def stop_workers(loader: DataLoader) -> None:
    """Shut down ``loader``'s live persistent workers, if any: its next pass starts new ones."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        loader._iterator = None


def _new_iterator(loader: DataLoader) -> Any:
    """A new iterator with workers (see ``make_iterator``)."""
    packer = loader.collate_fn if isinstance(loader.collate_fn, PackedCollate) else None
    pipes = pipes_fit(loader)
    region = None
    if packer is not None and (pipes or not pins_memory(loader)):
        slots = (loader.prefetch_factor or 2) + 1  # a batch in flight per prefetch slot, plus one
        region = packer.region = SharedRegion.for_workers(
            loader.num_workers, slots, loader.multiprocessing_context
        )
    iterator: Any
    try:
        loader.check_worker_number_rationality()
        if pipes:
            iterator = PipedWorkersIterator(loader, region)
        elif region is not None:
            iterator = _TorchIteratorWithRegion(loader, region)
        else:
            iterator = _MultiProcessingDataLoaderIter(loader)
    except BaseException:
        if region is not None:
            region.close()
        raise
    finally:
        if packer is not None:
            packer.region = None  # the forked workers have it; the iterator reads it
    if region is not None:
        weakref.finalize(iterator, region.close)
    if not pipes:  # the pipes are sized when made
        widen_result_pipe(iterator)
    return iterator


class _TorchIteratorWithRegion(_MultiProcessingDataLoaderIter):
    """torch's multiprocessing iterator, whose workers write large batches to ``region``."""

    def __init__(self, loader: DataLoader, region: SharedRegion) -> None:
        self.region = region
        super().__init__(loader)

    def _process_data(self, data: Any, worker_idx: int) -> Any:
        # Copied out before torch sends the worker its next task.
        return super()._process_data(self.region.receive(data), worker_idx)


def widen_result_pipe(iterator: Any, size: int = RESULT_PIPE_BYTES) -> int:
    """Let the pipe that carries workers' batches to the main process hold ``size`` bytes; its new size
    in bytes, or 0 where it cannot be changed (not Linux, no such pipe, or the system's limits).

    A pipe holds 64 KiB by default, so a batch of 256 x 1 KiB samples (a 262 KB pickle, below
    ``SHARED_BYTES_MIN``) crosses it in at least four rounds of a blocked write in the worker and a read
    in the main process, each a pair of context switches. In one write it arrives about 1.3x faster.
    """
    queue = getattr(iterator, "_worker_result_queue", None)
    reader = getattr(queue, "_reader", None)
    if reader is None or not hasattr(reader, "fileno"):
        return 0
    return set_pipe_size(reader.fileno(), size)


__all__ = ["make_iterator", "stop_workers", "widen_result_pipe"]
