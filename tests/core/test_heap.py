import multiprocessing
import platform
import resource
from typing import Any

import pytest

from stream_plugin.reading.heap import keep_freed_heap

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's allocator only"
)


def _faults_while_rebuilding_batches(keep: bool, results: Any) -> None:
    if keep:
        assert keep_freed_heap()
    batch = [bytes(100 * 1024) for _ in range(256)]  # one 25 MB batch of large samples
    del batch
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        batch = [bytes(100 * 1024) for _ in range(256)]
        del batch
    results.put(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)


def _faults(keep: bool) -> int:
    context = multiprocessing.get_context("spawn")  # a fresh allocator, untouched by pytest
    results = context.Queue()
    process = context.Process(target=_faults_while_rebuilding_batches, args=(keep, results))
    process.start()
    faults = results.get(timeout=60)
    process.join(timeout=60)
    assert process.exitcode == 0
    return faults


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
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=_faults_while_rebuilding_batches_of_mib_samples, args=(results,))
    process.start()
    faults = results.get(timeout=60)
    process.join(timeout=60)
    assert process.exitcode == 0
    # Fresh mappings would fault in 64 x 256 pages (16,384); reused heap memory faults in next to none.
    assert faults < 1000, faults
