import multiprocessing
import platform
import resource
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from stream_plugin.reading import heap
from stream_plugin.reading.heap import keep_freed_heap, settle_heap, user_chose_malloc

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's allocator only"
)


def _faults_while_rebuilding_batches(keep: bool | str, results: Any) -> None:
    if keep == "main":
        results.put(settle_heap(in_worker=False))
    elif keep:
        assert keep_freed_heap()
    batch = [bytes(100 * 1024) for _ in range(256)]  # one 25 MB batch of large samples
    del batch
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        batch = [bytes(100 * 1024) for _ in range(256)]
        del batch
    results.put(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)


def _in_fresh_process(target: Any, *args: Any, count: int = 1, timeout: float = 60) -> list[Any]:
    """The first ``count`` values ``target(*args, results)`` puts in ``results``, in a spawned process:
    a fresh allocator, untouched by pytest."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=target, args=(*args, results))
    process.start()
    found = [results.get(timeout=timeout) for _ in range(count)]
    process.join(timeout=60)
    assert process.exitcode == 0
    return found


def _faults(keep: bool | str) -> int:
    # With "main", first whether it was settled: the fault counts say what it did.
    return int(_in_fresh_process(_faults_while_rebuilding_batches, keep, count=2 if keep == "main" else 1)[-1])


def test_keep_freed_heap_lets_the_next_batch_reuse_the_memory_of_the_last() -> None:
    without = _faults(keep=False)
    kept = _faults(keep=True)
    assert without > 4 * 3000  # most pages of every batch faulted in again (25 MB is 6,250 pages)
    assert kept < without / 4, (kept, without)


def _faults_while_rebuilding_batches_of_mib_samples(results: Any) -> None:
    assert keep_freed_heap()
    source = bytes(1 << 20)
    batch = [source[1:] for _ in range(16)]  # one 16 MiB batch of 1 MiB samples (fresh copies)
    del batch
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        batch = [source[1:] for _ in range(16)]
        del batch
    results.put(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)


def test_keep_freed_heap_serves_samples_of_a_mib_from_the_heap_not_fresh_mappings() -> None:
    (faults,) = _in_fresh_process(_faults_while_rebuilding_batches_of_mib_samples)
    # Fresh mappings would fault in 64 x 256 pages (16,384); reused heap memory faults in next to none.
    assert faults < 1000, faults


def test_the_main_process_gets_the_heap_glibc_converges_to_and_reuses_the_last_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (heap.KEEP_MALLOC_VARIABLE, "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)  # the spawned child inherits this environment
    assert (heap.MAIN_MMAP_THRESHOLD, heap.MAIN_TRIM_THRESHOLD) == (32 << 20, 64 << 20)
    without = _faults(keep=False)
    settled = _faults(keep="main")
    assert settled < without / 4, (settled, without)


def test_the_main_process_heap_is_left_alone_when_the_user_opts_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(heap.KEEP_MALLOC_VARIABLE, "1")
    without = _faults(keep=False)
    left_alone = _faults(keep="main")
    assert left_alone > without / 2, (left_alone, without)  # faults as with glibc's defaults


@pytest.mark.parametrize(
    "environ, theirs",
    [
        ({}, False),
        ({heap.KEEP_MALLOC_VARIABLE: "0"}, False),
        ({heap.KEEP_MALLOC_VARIABLE: "1"}, True),
        ({"MALLOC_TRIM_THRESHOLD_": "131072"}, True),
        ({"MALLOC_ARENA_MAX": "2"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}, True),
        ({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, False),
    ],
)
def test_user_chose_malloc_reads_the_users_allocator_settings(environ: dict[str, str], theirs: bool) -> None:
    assert user_chose_malloc(environ) is theirs


def test_settle_heap_sets_each_policy_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(heap, "keep_freed_heap", lambda *args: calls.append(args) or True)
    monkeypatch.setattr(heap, "_settled", {})
    monkeypatch.delenv(heap.KEEP_MALLOC_VARIABLE, raising=False)
    monkeypatch.setattr(heap, "_USER_MALLOC_VARIABLES", ())
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert settle_heap(in_worker=False) and settle_heap(in_worker=False)
    assert calls == [(heap.MAIN_TRIM_THRESHOLD, heap.MAIN_MMAP_THRESHOLD)]
    assert settle_heap(in_worker=True)
    assert calls[1:] == [()]  # the worker's own defaults


class _LargeSamples(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """``count`` samples of 100 KiB, made in the worker."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __iter__(self) -> Iterator[bytes]:
        for index in range(self.count):
            yield bytes([index % 256]) * (100 * 1024)


def _faults_in_the_main_process_of_a_loader(results: Any) -> None:
    from stream_plugin import StreamingDataLoader

    # Batches of 64 x 100 KiB: 6.4 MB of new bytes (1,600 pages) per batch, copied out of a shared block.
    loader = StreamingDataLoader(_LargeSamples(64 * 21), batch_size=64, num_workers=1, collate_fn=list)
    batches = iter(loader)
    next(batches)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    received = sum(len(batch) for batch in batches)
    results.put((received, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))


def _loader_faults() -> tuple[int, int]:
    (found,) = _in_fresh_process(_faults_in_the_main_process_of_a_loader, timeout=120)
    return found


def test_the_main_process_of_a_loader_with_workers_reuses_the_memory_of_the_last_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (heap.KEEP_MALLOC_VARIABLE, "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)  # the spawned child inherits this environment
    received, settled = _loader_faults()
    assert received == 64 * 20
    monkeypatch.setenv(heap.KEEP_MALLOC_VARIABLE, "1")  # the user keeps glibc's defaults
    received, left_alone = _loader_faults()
    assert received == 64 * 20
    # Under glibc's defaults the freed batch goes back to the OS and the next one is faulted in anew.
    assert left_alone > 20 * 400, left_alone
    assert settled < left_alone / 3, (settled, left_alone)
