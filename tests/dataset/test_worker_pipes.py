"""Forked workers of an iterable dataset hand their batches over through pipes
(``reading.torch_internals.worker_pipes``), with torch's behaviour: order, seeds, errors, timeouts,
persistent workers, prefetch and shutdown; the gate in front of them (``torch_internals.gate``): the
torch versions checked, the worker loop's shape, and the user's way back to torch's own iterator."""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from stream_plugin import StreamingDataLoader
from stream_plugin.reading.torch_internals import (
    CHECKED_TORCH_VERSIONS,
    TORCH_ITERATOR_VARIABLE,
    gate,
    make_iterator,
    torch_iterator_reason,
)
from stream_plugin.reading.torch_internals import worker_pipes as pipes_module
from stream_plugin.reading.torch_internals.worker_pipes import (
    RECEIVE_BUFFER_BYTES,
    PipedWorkersIterator,
    pipes_fit,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the pipes serve forked workers")


class _Uneven(IterableDataset):
    """Worker ``w`` of ``n`` yields ``lengths[w]`` items: ``1000 * w + i``."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        worker = 0 if info is None else info.id
        return iter(range(1000 * worker, 1000 * worker + self.lengths[worker]))


class _Seeds(IterableDataset):
    def __iter__(self) -> Iterator[tuple[int, int, float, float]]:
        info = get_worker_info()
        assert info is not None
        for _ in range(3):
            yield info.id, torch.initial_seed(), random.random(), float(np.random.random())


class _FailsInWorker(IterableDataset):
    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        assert info is not None
        yield from range(4)
        if info.id == 1:
            raise ValueError("sample 4 of worker 1 is unreadable")
        yield from range(4, 8)


class _Killed(IterableDataset):
    def __iter__(self) -> Iterator[int]:
        yield 0
        os.kill(os.getpid(), signal.SIGKILL)
        yield 1


class _Slow(IterableDataset):
    def __iter__(self) -> Iterator[int]:
        time.sleep(30)
        yield 0


class _Counted(IterableDataset):
    """Counts the items its workers produced in ``produced`` (shared with the test)."""

    def __init__(self, produced: Any) -> None:
        self.produced = produced

    def __iter__(self) -> Iterator[int]:
        for item in range(1000):
            with self.produced.get_lock():
                self.produced.value += 1
            yield item


class _Texts(IterableDataset):
    """Batches whose pickle is larger than the main process's receive buffer."""

    def __iter__(self) -> Iterator[str]:
        for item in range(6):
            yield str(item) * (RECEIVE_BUFFER_BYTES // 2)


class _Squares(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        return index * index


def _as_lists(batches: Any) -> list[Any]:
    return [batch.tolist() if isinstance(batch, torch.Tensor) else batch for batch in batches]


def test_forked_workers_of_an_iterable_dataset_use_pipes() -> None:
    def kind(loader: DataLoader) -> bool:
        return pipes_fit(loader)

    assert kind(StreamingDataLoader(_Uneven([4, 4]), batch_size=2, num_workers=2))
    assert kind(StreamingDataLoader(_Uneven([4, 4]), batch_size=2, num_workers=2, multiprocessing_context="fork"))
    assert not kind(StreamingDataLoader(_Uneven([4, 4]), batch_size=2, num_workers=0))
    assert not kind(StreamingDataLoader(_Uneven([4, 4]), batch_size=2, num_workers=2, multiprocessing_context="spawn"))
    assert not kind(StreamingDataLoader(_Uneven([4, 4]), batch_size=2, num_workers=2, in_order=False))
    pinned = StreamingDataLoader(_Uneven([4, 4]), batch_size=2, num_workers=2, pin_memory=True)
    assert kind(pinned) == (not torch.accelerator.is_available())  # torch pins nothing without one
    assert not kind(StreamingDataLoader(_Squares(), batch_size=2, num_workers=2))  # map-style
    iterator = iter(make_iterator(StreamingDataLoader(_Uneven([4, 4]), batch_size=2, num_workers=2)))
    assert isinstance(iterator, PipedWorkersIterator)
    iterator._shutdown_workers()


@pytest.mark.parametrize(
    ("lengths", "batch_size", "drop_last"),
    [
        ([8, 8], 2, False),
        ([9, 3, 0], 2, False),
        ([9, 3, 0], 2, True),
        ([0, 5, 7], 3, False),
        ([5, 0], None, False),  # no batching: items one by one
    ],
)
def test_batches_come_in_torchs_order_from_workers_of_unequal_length(
    lengths: list[int], batch_size: int | None, drop_last: bool
) -> None:
    options = {"batch_size": batch_size, "drop_last": drop_last, "num_workers": len(lengths)}
    expected = _as_lists(DataLoader(_Uneven(lengths), **options))
    assert _as_lists(StreamingDataLoader(_Uneven(lengths), **options)) == expected
    assert sum(len(batch) if isinstance(batch, list) else 1 for batch in expected) > 0


def test_workers_get_torchs_seeds_and_worker_init_fn() -> None:
    started = multiprocessing.get_context("fork").Array("i", 2)

    def init(worker_id: int) -> None:
        started[worker_id] = 10 + worker_id

    def run(loader_class: type[DataLoader]) -> list[Any]:
        generator = torch.Generator().manual_seed(1234)
        loader = loader_class(_Seeds(), batch_size=None, num_workers=2, generator=generator, worker_init_fn=init)
        return list(loader)

    expected = run(DataLoader)
    assert run(StreamingDataLoader) == expected
    assert list(started) == [10, 11]
    assert len({seed for _, seed, _, _ in expected}) == 2  # a seed per worker


def test_an_error_in_a_worker_reaches_the_main_process() -> None:
    loader = StreamingDataLoader(_FailsInWorker(), batch_size=2, num_workers=2)
    iterator = iter(loader)
    assert [batch.tolist() for batch in (next(iterator), next(iterator), next(iterator), next(iterator))] == [
        [0, 1],
        [0, 1],
        [2, 3],
        [2, 3],
    ]
    next(iterator)  # worker 0's next batch
    with pytest.raises(ValueError, match=r"(?s)in DataLoader worker process 1.*sample 4 of worker 1 is unreadable"):
        next(iterator)


def test_a_killed_worker_is_reported() -> None:
    iterator = iter(StreamingDataLoader(_Killed(), batch_size=2, num_workers=1))
    with pytest.raises(RuntimeError, match="DataLoader worker .*(exited unexpectedly|killed by signal)"):
        for _ in iterator:
            pass


def test_a_loader_timeout_stops_the_wait() -> None:
    iterator = iter(StreamingDataLoader(_Slow(), batch_size=1, num_workers=1, timeout=0.5))
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0.5 seconds"):
        next(iterator)
    assert time.monotonic() - started < 10
    del iterator


def test_a_worker_prefetches_prefetch_factor_batches() -> None:
    produced = multiprocessing.get_context("fork").Value("i", 0)
    loader = StreamingDataLoader(_Counted(produced), batch_size=4, num_workers=1, prefetch_factor=3)
    iterator = make_iterator(loader)
    try:
        time.sleep(1.0)
        assert produced.value == 3 * 4  # three batches ahead, as torch allows, and no more
        next(iterator)
        time.sleep(0.5)
        assert produced.value == 4 * 4  # one more credit, one more batch
    finally:
        iterator._shutdown_workers()


def test_a_batch_larger_than_the_receive_buffer_arrives_whole() -> None:
    batches = list(StreamingDataLoader(_Texts(), batch_size=3, num_workers=1, collate_fn=list))
    assert [[len(text) for text in batch] for batch in batches] == [[RECEIVE_BUFFER_BYTES // 2] * 3] * 2
    assert [batch[0][0] for batch in batches] == ["0", "3"]


def test_persistent_workers_serve_every_pass_in_torchs_order() -> None:
    def passes(loader: DataLoader) -> list[Any]:
        first = iter(loader)
        partial = [next(first).tolist()]  # a pass abandoned after one batch
        return [partial, _as_lists(loader), _as_lists(loader)]

    options: dict[str, Any] = {"batch_size": 2, "num_workers": 2, "persistent_workers": True}
    expected = passes(DataLoader(_Uneven([7, 4]), **options))
    loader = StreamingDataLoader(_Uneven([7, 4]), **options)
    assert passes(loader) == expected
    iterator = loader._iterator
    assert isinstance(iterator, PipedWorkersIterator)
    workers = list(iterator._workers)
    assert all(worker.is_alive() for worker in workers)  # the same workers served every pass
    iterator._shutdown_workers()
    assert not any(worker.is_alive() for worker in workers)


def test_leaving_a_pass_early_stops_its_workers() -> None:
    iterator = make_iterator(StreamingDataLoader(_Uneven([10_000, 10_000]), batch_size=2, num_workers=2))
    next(iterator)
    workers = list(iterator._workers)
    descriptors = [receiver.fd for receiver in iterator._receivers] + list(iterator._controls)
    del iterator
    for worker in workers:
        worker.join(timeout=10)
    assert [worker.exitcode for worker in workers] == [0, 0]
    for fd in descriptors:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_workers_exit_when_the_main_process_dies(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_worker_pipes import _Uneven
        from stream_plugin import StreamingDataLoader
        from stream_plugin.reading.torch_internals import make_iterator

        iterator = make_iterator(StreamingDataLoader(_Uneven([10**6, 10**6]), batch_size=2, num_workers=2))
        next(iterator)
        print(*(worker.pid for worker in iterator._workers), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 30
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _running(pid)]
        time.sleep(0.1)
    assert not alive, f"workers {alive} outlived their main process"


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has exited (its parent, gone, cannot reap it)


def test_a_torch_worker_loop_of_unknown_shape_keeps_torchs_iterator(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def holder_loop(  # torch 2.14's shape: the dataset in a list the worker empties
        dataset_kind, dataset_holder, index_queue, data_queue, done_event, auto_collation, collate_fn,
        drop_last, base_seed, init_fn, worker_id, num_workers, persistent_workers, shared_seed,
    ) -> None: ...

    def other_loop(dataset_kind, dataset, index_queue, data_queue, done_event) -> None: ...

    loader = StreamingDataLoader(_Uneven([4, 4]), batch_size=2, num_workers=2)
    monkeypatch.setattr(pipes_module.torch_worker, "_worker_loop", holder_loop)
    assert pipes_module.worker_loop_dataset_parameter() == "dataset_holder"
    assert torch_iterator_reason(loader) is None
    monkeypatch.setattr(pipes_module.torch_worker, "_worker_loop", other_loop)
    assert pipes_module.worker_loop_dataset_parameter() is None
    monkeypatch.undo()
    # A shape not recognised (torch's real loop kept, so that torch's iterator can run it):
    monkeypatch.setattr(gate, "worker_loop_dataset_parameter", lambda: None)
    gate._warn_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger=gate.__name__):
        reason = torch_iterator_reason(loader)
        assert reason is not None and "found another shape" in reason and TORCH_ITERATOR_VARIABLE in reason
        iterator = make_iterator(loader)
        assert type(iterator) is _MultiProcessingDataLoaderIter  # torch's own
        assert _as_lists(iterator) == _as_lists(DataLoader(_Uneven([4, 4]), batch_size=2, num_workers=2))
    assert [record.getMessage() for record in caplog.records] == [reason]  # said once
    monkeypatch.undo()
    gate._warn_once.cache_clear()
    assert pipes_module.worker_loop_dataset_parameter() in ("dataset", "dataset_holder")


def test_the_running_torch_is_one_the_fast_path_was_checked_with() -> None:
    assert gate.torch_release() in CHECKED_TORCH_VERSIONS
    loader = StreamingDataLoader(_Uneven([4, 4]), batch_size=2, num_workers=2)
    assert torch_iterator_reason(loader, environ={}) is None
    iterator = make_iterator(loader)
    assert isinstance(iterator, PipedWorkersIterator)
    assert _as_lists(iterator) == _as_lists(DataLoader(_Uneven([4, 4]), batch_size=2, num_workers=2))


def test_an_unchecked_torch_keeps_torchs_iterator_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(torch, "__version__", "2.99.0+cpu")
    gate._warn_once.cache_clear()
    loader = StreamingDataLoader(_Uneven([4, 4]), batch_size=2, num_workers=2)
    with caplog.at_level(logging.WARNING, logger=gate.__name__):
        first, second = make_iterator(loader), make_iterator(loader)
    assert type(first) is _MultiProcessingDataLoaderIter and type(second) is _MultiProcessingDataLoaderIter
    (record,) = caplog.records
    message = record.getMessage()
    assert "found torch 2.99.0" in message and "2.13.0" in message
    assert "torch_iterator=True" in message and f"{TORCH_ITERATOR_VARIABLE}=1" in message
    del first, second
    gate._warn_once.cache_clear()


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_the_user_can_choose_torchs_own_iterator(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _as_lists(DataLoader(_Uneven([5, 3]), batch_size=2, num_workers=2))
    chosen = {"torch_iterator": True} if how == "argument" else {}
    if how == "environment":
        monkeypatch.setenv(TORCH_ITERATOR_VARIABLE, "1")
    loader = StreamingDataLoader(_Uneven([5, 3]), batch_size=2, num_workers=2, **chosen)
    assert torch_iterator_reason(loader) is not None
    assert type(make_iterator(loader)) is _MultiProcessingDataLoaderIter
    assert _as_lists(loader) == expected
    # The other way: the default, or the variable at 0, takes the pipes again.
    if how == "environment":
        monkeypatch.setenv(TORCH_ITERATOR_VARIABLE, "0")
    back = StreamingDataLoader(_Uneven([5, 3]), batch_size=2, num_workers=2, torch_iterator=False)
    assert torch_iterator_reason(back) is None
    assert isinstance(make_iterator(back), PipedWorkersIterator)
    assert _as_lists(back) == expected


def test_torchs_own_iterator_serves_persistent_workers_and_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    options: dict[str, Any] = {"batch_size": 2, "num_workers": 2, "persistent_workers": True}
    expected = [_as_lists(DataLoader(_Uneven([3, 4]), **options))] * 2
    loader = StreamingDataLoader(_Uneven([3, 4]), torch_iterator=True, **options)
    assert [_as_lists(loader), _as_lists(loader)] == expected
    iterator = loader._iterator
    assert type(iterator) is _MultiProcessingDataLoaderIter  # one iterator, its workers kept
    loader._restart_workers()
    assert loader._iterator is None and not any(worker.is_alive() for worker in iterator._workers)


def test_a_huge_prefetch_factor_does_not_block_the_main_process() -> None:
    import threading

    # 100,000 credits of one byte each would overfill the control pipe (64 KiB) while the worker
    # fills its result pipe: both would wait on the other. The grant is capped instead.
    loader = StreamingDataLoader(_Uneven([30_000]), batch_size=1, num_workers=1, prefetch_factor=100_000)
    batches: list[Any] = []
    reader = threading.Thread(target=lambda: batches.extend(loader), daemon=True)
    reader.start()
    reader.join(timeout=120)
    assert not reader.is_alive(), "the loader is stuck"
    assert [int(batch) for batch in batches] == list(range(30_000))


def test_an_iterator_whose_workers_were_shut_down_says_so() -> None:
    iterator = make_iterator(StreamingDataLoader(_Uneven([100, 100]), batch_size=2, num_workers=2))
    next(iterator)
    iterator._shutdown_workers()
    with pytest.raises(RuntimeError, match="found them shut down mid-pass"):
        next(iterator)
    ended = make_iterator(StreamingDataLoader(_Uneven([2, 2]), batch_size=2, num_workers=2))
    assert len(list(ended)) == 2
    with pytest.raises(StopIteration):  # an exhausted iterator stays exhausted
        next(ended)
