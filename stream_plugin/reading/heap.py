"""Let a DataLoader worker reuse the memory of one batch for the next.

glibc returns freed memory at the top of the heap to the OS once more than 128 KiB is free there.
A worker that builds a batch of large samples (256 x 100 KiB is 25 MB), hands it over and frees it,
then page-faults the same amount back in, zero-filled by the kernel, for the next batch: about a third
of its time on such batches. Raising the trim threshold in the worker keeps that memory in the heap.
Only worker processes, which exist to produce batches, are changed; the main process is the user's.
"""

from __future__ import annotations

import ctypes
import platform

WORKER_TRIM_THRESHOLD = 64 << 20  # bytes of free heap a worker keeps: a few batches of large samples
_M_TRIM_THRESHOLD = -1  # mallopt parameter number, from glibc's malloc.h


def keep_freed_heap(limit: int = WORKER_TRIM_THRESHOLD) -> bool:
    """Raise glibc's trim threshold to ``limit`` bytes in this process; False where libc is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(limit)))
