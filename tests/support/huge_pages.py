"""Whether a file is mapped in huge pages (``/proc/self/smaps``), and the page-cache states the huge-page
tests need: shard maps ask for huge pages (``format.shard_file``), and the benchmarks warm the page
cache in huge folios (``benchmarks.workloads``, whose smaps and page-cache helpers these are)."""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

import pytest

from benchmarks.workloads import drop_from_page_cache, pmd_mapped_bytes, smaps_of
from stream_plugin.format.shard_file import HUGE_PAGE_BYTES

__all__ = ["drop_from_page_cache", "pmd_mapped_kib", "require_huge_folios", "smaps_of"]


def pmd_mapped_kib(path: Path) -> int:
    """KiB of ``path`` this process maps in huge pages after touching every page of it."""
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        sum(mapped[offset] for offset in range(0, len(mapped), 4096))
        return pmd_mapped_bytes(path) // 1024


def kernel_maps_large_writes_in_huge_pages(folder: Path) -> bool:
    """Whether this kernel and file system keep a file written in one 4 MiB write in huge folios (ext4
    on Linux 6.18 does; tmpfs without huge= and file systems without large folios do not)."""
    probe = folder / "probe"
    probe.write_bytes(os.urandom(2 * HUGE_PAGE_BYTES))
    try:
        return pmd_mapped_kib(probe) > 0
    finally:
        probe.unlink()


def require_huge_folios(folder: Path) -> Path:
    """``folder``, where its files' page cache can hold huge folios; skips the test where it cannot."""
    if sys.platform != "linux" or not kernel_maps_large_writes_in_huge_pages(folder):
        pytest.skip("this kernel or file system keeps no huge folios in the page cache")
    return folder
