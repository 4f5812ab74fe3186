"""Let a DataLoader worker reuse the memory of one batch for the next.

glibc returns freed memory at the top of the heap to the OS once more than 128 KiB is free there.
A worker that builds a batch of large samples (256 x 100 KiB is 25 MB), hands it over and frees it,
then page-faults the same amount back in, zero-filled by the kernel, for the next batch: about a third
of its time on such batches. Raising the trim threshold in the worker keeps that memory in the heap.
Fixing the trim threshold also fixes glibc's mmap threshold, at 128 KiB unless set too: every sample of
1 MiB or more would then get (and lose) its own fresh mapping, 256 page faults per MiB (0.7 ms for a
1 MiB sample against 0.06 ms from the heap), so samples up to ``WORKER_MMAP_THRESHOLD`` come from the
heap as well. Only worker processes, which exist to produce batches, are changed; the main process is
the user's.
"""

from __future__ import annotations

import ctypes
import platform

# Bytes of free heap a worker keeps: a few batches of large samples (256 x 1 MiB is 256 MiB). The heap
# only ever holds what the worker's own batches needed at once, so this bounds what stays resident.
WORKER_TRIM_THRESHOLD = 512 << 20
WORKER_MMAP_THRESHOLD = 32 << 20  # allocations up to this size come from the heap (glibc's maximum)
_M_TRIM_THRESHOLD = -1  # mallopt parameter numbers, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def keep_freed_heap(limit: int = WORKER_TRIM_THRESHOLD, mmap_threshold: int = WORKER_MMAP_THRESHOLD) -> bool:
    """Keep up to ``limit`` bytes of freed heap in this process, and serve allocations up to
    ``mmap_threshold`` bytes from the heap; False where libc is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(limit))) and bool(
        libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(mmap_threshold))
    )
