"""Forked DataLoader workers that hand their batches over through a pipe each.

torch's multiprocessing iterator sends each worker a task per batch through a queue, and each worker
sends the batch back through one queue shared by all workers. Every trip wakes a queue feeder thread
that needs the interpreter lock, and every read and write takes a cross-process lock. For batches of
small samples that is most of the cost of the hand-off: a worker spends about as long handing a batch
over as reading it (``benchmarks/notes/iterate.1.large-samples.md``).

For an iterable dataset the tasks carry nothing (every index is the same list of ``None``), so
``PipedWorkersIterator`` replaces the two queues, for workers it forks, with:

- a **result pipe per worker**: the worker pickles each batch itself, in its own thread, and writes it
  with its length; the main process reads the workers' pipes in turn (torch's round-robin order, one
  batch per active worker) into a buffer it keeps;
- a **control pipe per worker**: one byte per batch the worker may start (``prefetch_factor`` in
  flight, as torch allows), and torch's messages to stop or to resume a persistent worker.

The workers run torch's own worker loop (``torch.utils.data._utils.worker._worker_loop``) on these
pipes, so seeds, ``get_worker_info()``, ``worker_init_fn``, errors raised in a worker, persistent
workers and the end of an iterable are torch's. Where a loader cannot take this path (workers not
forked, a map-style dataset, ``pin_memory`` with an accelerator present, since torch pins in a thread
of its own, or ``in_order=False``), ``pipes_fit`` says so and the loader keeps torch's iterator; a torch
whose worker loop has another shape (``worker_loop_dataset_parameter``) is refused by the gate
(``torch_internals.gate``) before this module is asked.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import queue
import select
import struct
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import IterableDataset
from torch.utils.data import _utils as torch_utils
from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL, signal_handling
from torch.utils.data._utils import worker as torch_worker
from torch.utils.data.dataloader import _BaseDataLoaderIter, _DatasetKind
from torch.utils.data.datapipes.datapipe import IterDataPipe

from stream_plugin.reading.transport import SharedRegion, forks_workers

RESULT_PIPE_BYTES = 1 << 20  # a worker's result pipe holds a whole pickled batch (Linux's default cap)
RECEIVE_BUFFER_BYTES = 1 << 20  # what the main process reads from a result pipe at once
_LENGTH = struct.Struct("<Q")  # each message on a result pipe: its length, then its pickle
_CREDIT = b"c"  # control pipe: the worker may start one more batch
# Credits a worker holds at most (a larger prefetch_factor is capped): a whole grant fits in the
# control pipe (64 KiB), so granting never blocks the main process on a worker that is writing.
MAX_CREDITS = 4096
_FINAL = b"n"  # control pipe: torch's final signal (None): the worker exits
_RESUME = b"r"  # control pipe: torch's _ResumeIteration, followed by its seed (8 bytes, or _NO_SEED)
_NO_SEED = b"\xff" * 8
# torch's worker loop as this module calls it; torch 2.14 takes the dataset in a list it empties
# ("dataset_holder"), so that the Process object does not keep the dataset alive.
_WORKER_LOOP_PARAMETERS = (
    "dataset_kind",
    "dataset",
    "index_queue",
    "data_queue",
    "done_event",
    "auto_collation",
    "collate_fn",
    "drop_last",
    "base_seed",
    "init_fn",
    "worker_id",
    "num_workers",
    "persistent_workers",
    "shared_seed",
)


def set_pipe_size(fd: int, size: int) -> int:
    """Let the pipe behind ``fd`` hold ``size`` bytes (capped by the system's limit); its new size, or
    0 where it cannot be changed (not Linux, or over the user's pipe quota)."""
    try:
        import fcntl

        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        return int(fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, min(size, limit)))
    except (ImportError, AttributeError, OSError, ValueError):
        return 0


def pipes_fit(loader: Any) -> bool:
    """Whether ``loader``'s workers can hand over their batches through pipes (see the module)."""
    return (
        loader.num_workers > 0
        and loader._dataset_kind == _DatasetKind.Iterable
        and isinstance(loader.dataset, IterableDataset)
        and not isinstance(loader.dataset, IterDataPipe)
        and not pins_memory(loader)
        and getattr(loader, "in_order", True)
        and forks_workers(loader.multiprocessing_context)
    )


def pins_memory(loader: Any) -> bool:
    """Whether torch's iterator would pin batches (a thread of its own does): ``pin_memory`` with an
    accelerator present. Without one torch pins nothing, and neither do the pipes."""
    if not loader.pin_memory:
        return False
    accelerator = getattr(torch, "accelerator", None)
    return bool(accelerator.is_available() if accelerator is not None else torch.cuda.is_available())


def worker_loop_dataset_parameter() -> str | None:
    """How torch's worker loop takes the dataset ("dataset" or "dataset_holder"); None if its
    parameters are not the ones this module knows."""
    parameters = list(inspect.signature(torch_worker._worker_loop).parameters)
    name = parameters[1] if len(parameters) > 1 else None
    if name not in ("dataset", "dataset_holder"):
        return None
    parameters[1] = "dataset"
    return name if tuple(parameters) == _WORKER_LOOP_PARAMETERS else None


class _TaskFeed:
    """A worker's ``index_queue``: a task for each credit the main process sent, and its messages.

    Every task is the same (an iterable dataset's index), so only credits travel: one byte each.
    """

    def __init__(self, fd: int, index: Any, done_event: Any) -> None:
        self.fd = fd
        self.index = index
        self.done_event = done_event
        self.credits = 0
        self.sent = 0  # tasks handed to the loop: their numbers
        self.pending = b""  # control bytes read but not yet taken

    def get(self, timeout: float | None = None) -> Any:
        while True:
            message = self._take()
            if message is not _NOTHING:
                return message
            if self.credits:
                self.credits -= 1
                self.sent += 1
                return (self.sent - 1, self.index)
            if not _readable(self.fd, timeout):
                raise queue.Empty
            chunk = os.read(self.fd, 4096)
            if not chunk:  # the main process closed its end
                if self.done_event.is_set():
                    return None
                raise queue.Empty  # it died: the loop's watchdog notices and ends the worker
            self.pending += chunk

    def _take(self) -> Any:
        """Credits from the bytes read so far; a message if one is complete (else ``_NOTHING``)."""
        pending = self.pending
        credits = len(pending) - len(pending.lstrip(_CREDIT))
        self.credits += credits
        pending = pending[credits:]
        message: Any = _NOTHING
        if pending[:1] == _FINAL:
            message, pending = None, pending[1:]
        elif pending[:1] == _RESUME and len(pending) >= 9:
            seed_bytes, pending = pending[1:9], pending[9:]
            seed = None if seed_bytes == _NO_SEED else _LENGTH.unpack(seed_bytes)[0]
            message = torch_worker._ResumeIteration(seed)
            self.credits = 0  # the main process grants a new pass its own credits
        self.pending = pending
        return message


_NOTHING = object()


def _readable(fd: int, timeout: float | None) -> bool:
    """Whether ``fd`` has something to read (or its end) within ``timeout`` seconds (None: no limit).
    ``poll``, not ``select``: a process with a thousand open files has descriptors ``select`` refuses."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else max(0, int(timeout * 1000))))


class _ResultSink:
    """A worker's ``data_queue``: pickles what the loop puts and writes it to the result pipe, in the
    worker's own thread (no feeder thread)."""

    def __init__(self, fd: int, done_event: Any) -> None:
        self.fd = fd
        self.done_event = done_event

    def put(self, item: Any) -> None:
        payload = memoryview(ForkingPickler.dumps(item))
        header = _LENGTH.pack(len(payload))
        try:
            written = os.writev(self.fd, [header, payload])
            while written < len(header) + len(payload):  # a write cut short by a signal
                if written < len(header):
                    written += os.write(self.fd, header[written:])
                else:
                    written += os.write(self.fd, payload[written - len(header) :])
        except BrokenPipeError:
            if not self.done_event.is_set():
                raise  # the main process is gone without stopping the workers: end this one

    def cancel_join_thread(self) -> None:
        """Nothing to do: no feeder thread."""

    def close(self) -> None:
        """Nothing to do: the pipe closes with the worker."""


def _run_worker(keep: tuple[int, int], others: list[int], *loop_arguments: Any) -> None:
    """A worker's process: drop the pipe ends that are not its own (so that a pipe sees its end when
    its one writer or reader goes), then torch's worker loop."""
    for fd in others:
        if fd not in keep:
            os.close(fd)
    torch_worker._worker_loop(*loop_arguments)


class _Receiver:
    """Reads one worker's result pipe: whole messages, unpickled, through a buffer it keeps."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.buffer = bytearray(RECEIVE_BUFFER_BYTES)
        self.start = 0
        self.end = 0

    def receive(self, wait: Any) -> Any:
        """The next message; ``wait(fd)`` is called whenever the pipe has nothing to read yet."""
        header = self._exactly(_LENGTH.size, wait)
        (size,) = _LENGTH.unpack(header)
        return ForkingPickler.loads(self._exactly(size, wait))

    def _exactly(self, size: int, wait: Any) -> memoryview:
        available = self.end - self.start
        if available >= size:
            view = memoryview(self.buffer)[self.start : self.start + size]
            self.start += size
            return view
        if size > len(self.buffer):  # a message larger than the buffer gets one of its own
            whole = bytearray(size)
            whole[:available] = self.buffer[self.start : self.end]
            self.start = self.end = 0
            self._fill(memoryview(whole), available, wait)
            return memoryview(whole)
        # Move what is left to the front, then read until the message is whole.
        self.buffer[:available] = self.buffer[self.start : self.end]
        self.start, self.end = 0, available
        while self.end < size:
            self.end = self._read(memoryview(self.buffer), self.end, wait)
        self.start = size
        return memoryview(self.buffer)[:size]

    def _fill(self, view: memoryview, filled: int, wait: Any) -> None:
        while filled < len(view):
            filled = self._read(view, filled, wait)

    def _read(self, view: memoryview, filled: int, wait: Any) -> int:
        while True:
            try:
                count = os.readv(self.fd, [view[filled:]])
            except BlockingIOError:
                wait(self.fd)
                continue
            if count == 0:
                raise EOFError
            return filled + count


class PipedWorkersIterator(_BaseDataLoaderIter):
    """torch's multiprocessing iterator for an iterable dataset, with a pipe per worker each way.

    ``region``: the shared memory its workers were forked with (``transport.SharedRegion``), from which
    it copies out the parts of a batch they wrote there; None if they have none.
    """

    # Until __init__ starts workers, there is nothing to shut down (__del__ runs after a failed __init__).
    _shutdown = True
    _workers: list[Any] = []  # noqa: RUF012 (never mutated: each iterator sets its own list)

    def __init__(self, loader: Any, region: SharedRegion | None = None) -> None:
        super().__init__(loader)
        self.region = region
        self._prefetch_factor = loader.prefetch_factor or 2
        context = loader.multiprocessing_context or torch.multiprocessing
        index = next(iter(self._index_sampler))  # the same for every task of an iterable dataset
        self._workers_done_event = context.Event()
        self._worker_pids_set = False
        self._workers = []
        self._receivers: list[_Receiver] = []
        self._controls: list[int] = []
        self._shutdown = False
        holds_dataset = worker_loop_dataset_parameter() == "dataset_holder"
        pipes = [(os.pipe(), os.pipe()) for _ in range(self._num_workers)]  # (result, control) each
        every_fd = [fd for result, control in pipes for fd in (*result, *control)]
        try:
            for worker_id, ((_, result_write), (control_read, _)) in enumerate(pipes):
                set_pipe_size(result_write, RESULT_PIPE_BYTES)
                process = context.Process(
                    target=_run_worker,
                    args=(
                        (control_read, result_write),
                        every_fd,
                        self._dataset_kind,
                        [self._dataset] if holds_dataset else self._dataset,
                        _TaskFeed(control_read, index, self._workers_done_event),
                        _ResultSink(result_write, self._workers_done_event),
                        self._workers_done_event,
                        self._auto_collation,
                        self._collate_fn,
                        self._drop_last,
                        self._base_seed,
                        loader.worker_init_fn,
                        worker_id,
                        self._num_workers,
                        self._persistent_workers,
                        self._shared_seed,
                    ),
                    daemon=True,
                )
                process.start()
                self._workers.append(process)
        finally:
            for (result_read, result_write), (control_read, control_write) in pipes:
                os.close(result_write)
                os.close(control_read)
                if len(self._receivers) < len(self._workers):
                    self._receivers.append(_Receiver(result_read))
                    self._controls.append(control_write)
                else:  # this worker never started
                    os.close(result_read)
                    os.close(control_write)
        signal_handling._set_worker_pids(id(self), tuple(process.pid for process in self._workers))
        signal_handling._set_SIGCHLD_handler()
        self._worker_pids_set = True
        self._reset(loader, first_iter=True)

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        super()._reset(loader, first_iter)
        self._active = [True] * self._num_workers
        self._turn = 0  # the worker whose batch comes next (torch's round-robin, from worker 0)
        if not first_iter:  # persistent workers: a new pass, prefetched batches of the last one dropped
            seed = _NO_SEED if self._shared_seed is None else _LENGTH.pack(self._shared_seed)
            for worker_id in range(self._num_workers):
                self._send(worker_id, _RESUME + seed)
            for worker_id in range(self._num_workers):
                while not isinstance(self._receive(worker_id)[0], torch_worker._ResumeIteration):
                    pass
        for worker_id in range(self._num_workers):
            self._send(worker_id, _CREDIT * min(self._prefetch_factor, MAX_CREDITS))

    def _next_data(self) -> Any:
        while True:
            if not any(self._active):
                if not self._persistent_workers:
                    self._shutdown_workers()
                raise StopIteration
            if self._shutdown:
                raise RuntimeError(
                    "DataLoader iterator: expected live workers, found them shut down mid-pass (the loader "
                    "restarted them); call iter(loader) for a new pass"
                )
            worker_id = self._turn
            self._turn = (worker_id + 1) % self._num_workers
            if not self._active[worker_id]:
                continue
            _, data = self._receive(worker_id)
            if isinstance(data, torch_worker._IterableDatasetStopIteration):
                self._active[worker_id] = False
                if not self._persistent_workers:
                    self._send(worker_id, _FINAL)
                continue
            if self.region is not None:  # copied out before the worker may start its next batch
                data = self.region.receive(data)
            self._send(worker_id, _CREDIT)
            if isinstance(data, ExceptionWrapper):
                data.reraise()
            return data

    def _send(self, worker_id: int, message: bytes) -> None:
        with contextlib.suppress(BrokenPipeError):  # the worker is gone; receiving from it says how
            os.write(self._controls[worker_id], message)

    def _receive(self, worker_id: int) -> Any:
        process = self._workers[worker_id]

        def wait(fd: int) -> None:
            if _readable(fd, self._timeout if self._timeout > 0 else MP_STATUS_CHECK_INTERVAL):
                return
            if not process.is_alive():
                raise RuntimeError(f"DataLoader worker (pid(s) {process.pid}) exited unexpectedly")
            if self._timeout > 0:
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")

        try:
            return self._receivers[worker_id].receive(wait)
        except EOFError:
            process.join(timeout=MP_STATUS_CHECK_INTERVAL)
            raise RuntimeError(
                f"DataLoader worker (pid(s) {process.pid}) exited unexpectedly with exit code {process.exitcode}"
            ) from None

    def _shutdown_workers(self) -> None:
        if torch_utils is None or torch_utils.python_exit_status is not False:
            return  # Python is shutting down: the daemonic workers go with it
        if self._shutdown:
            return
        self._shutdown = True
        try:
            self._workers_done_event.set()
            for worker_id in range(len(self._workers)):
                self._send(worker_id, _FINAL)
            for fd in self._controls:
                os.close(fd)
            for receiver in self._receivers:  # a worker blocked on a full pipe gets EPIPE and stops
                os.close(receiver.fd)
            for process in self._workers:
                process.join(timeout=MP_STATUS_CHECK_INTERVAL)
        finally:
            if self._worker_pids_set:
                signal_handling._remove_worker_pids(id(self))
                self._worker_pids_set = False
            for process in self._workers:
                if process.is_alive():
                    process.terminate()
                    process.join(timeout=MP_STATUS_CHECK_INTERVAL)

    def __del__(self) -> None:
        self._shutdown_workers()


__all__ = [
    "PipedWorkersIterator",
    "pins_memory",
    "pipes_fit",
    "set_pipe_size",
    "worker_loop_dataset_parameter",
]
