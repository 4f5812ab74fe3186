"""Let a process that reads samples reuse the memory of one batch for the next.

glibc returns freed memory at the top of the heap to the OS once more than 128 KiB is free there.
A process that builds a batch of large samples (256 x 100 KiB is 25 MB), hands it over and frees it,
then page-faults the same amount back in, zero-filled by the kernel, for the next batch: about half of
its time on such batches. Raising the trim threshold keeps that memory in the heap. Fixing the trim
threshold also fixes glibc's mmap threshold, at 128 KiB unless set too: every sample of 1 MiB or more
would then get (and lose) its own fresh mapping, 256 page faults per MiB (0.7 ms for a 1 MiB sample
against 0.06 ms from the heap), so larger samples come from the heap as well.

Two policies, set once per process (``settle_heap``) by the first reader in it, or in the main process
by a ``StreamingDataLoader`` that starts workers:

- **A DataLoader worker** exists to produce batches: it keeps up to 512 MiB of freed heap (a batch of
  256 x 1 MiB) and serves allocations up to 32 MiB from the heap.
- **The main process** is the user's training process, whether it reads samples itself
  (``num_workers=0``) or receives whole batches from workers through ``StreamingDataLoader`` (a batch
  of 256 x 100 KiB arrives there as 25 MB of new ``bytes``, page-faulted in anew for every batch under
  glibc's defaults). It gets exactly the state glibc's own dynamic heuristic converges to once a
  process has freed one large block (mmap threshold 32 MiB, glibc's maximum on 64-bit, and trim
  threshold twice that). Nothing is lowered, and at most
  64 MiB of freed heap stays resident. It is left alone where the user chose an allocator setting
  (``MALLOC_*_`` variables or ``glibc.malloc`` tunables), or with ``STREAM_PLUGIN_KEEP_MALLOC=1``.

A worker also moves every object it holds when it starts reading into the garbage collector's
permanent generation (``gc.freeze``): the modules it imported and the dataset live as long as it does,
and a worker that was not forked (``spawn``, ``forkserver``: Python 3.14's default on Linux) would
otherwise have the collector scan that whole heap, over and over, while it builds batches. That cost
3 to 4 times the hand-off rate of 1 KiB samples (benchmarks/RESULTS.md, "Workers that are not forked").
"""

from __future__ import annotations

import ctypes
import gc
import os
import platform

# Bytes of free heap a worker keeps: a few batches of large samples (256 x 1 MiB is 256 MiB). The heap
# only ever holds what the worker's own batches needed at once, so this bounds what stays resident.
WORKER_TRIM_THRESHOLD = 512 << 20
WORKER_MMAP_THRESHOLD = 32 << 20  # allocations up to this size come from the heap (glibc's maximum)
# glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit, and the trim threshold its dynamic rule pairs with it.
MAIN_MMAP_THRESHOLD = 32 << 20
MAIN_TRIM_THRESHOLD = 2 * MAIN_MMAP_THRESHOLD
KEEP_MALLOC_VARIABLE = "STREAM_PLUGIN_KEEP_MALLOC"  # "1": never change the main process's allocator
# What a user sets to choose glibc's allocator settings; any of them means the choice is theirs.
_USER_MALLOC_VARIABLES = (
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
    "MALLOC_ARENA_MAX",
)
_M_TRIM_THRESHOLD = -1  # mallopt parameter numbers, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3

_settled: dict[int, str] = {}  # pid -> the policy this process already has ("worker" or "main")
_frozen: set[int] = set()  # pids whose startup objects are in the collector's permanent generation


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


def user_chose_malloc(environ: dict[str, str] | None = None) -> bool:
    """Whether this process's allocator settings are the user's: set by environment, or opted out."""
    env = os.environ if environ is None else environ
    if env.get(KEEP_MALLOC_VARIABLE, "") not in ("", "0"):
        return True
    return any(name in env for name in _USER_MALLOC_VARIABLES) or "glibc.malloc." in env.get("GLIBC_TUNABLES", "")


def freeze_startup_objects() -> None:
    """Move every object this process holds into the collector's permanent generation, once per process
    (``gc.freeze``; see the module): for a DataLoader worker, whose startup objects live as long as it."""
    pid = os.getpid()
    if pid not in _frozen:
        gc.freeze()
        _frozen.add(pid)


def settle_heap(*, in_worker: bool) -> bool:
    """Give this process its reader's heap policy (see the module), once per process; True if set now
    or earlier, False where it is left alone (not glibc, or the user's choice in the main process)."""
    kind = "worker" if in_worker else "main"
    pid = os.getpid()
    if _settled.get(pid) == kind:
        return True
    if kind == "worker":
        freeze_startup_objects()
        done = keep_freed_heap()
    elif user_chose_malloc():
        return False
    else:
        done = keep_freed_heap(MAIN_TRIM_THRESHOLD, MAIN_MMAP_THRESHOLD)
    if done:
        _settled[pid] = kind
    return done
