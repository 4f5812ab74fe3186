"""Whether a file is mapped in huge pages (``/proc/self/smaps``), and the page-cache states the huge-page
tests need: shard maps ask for huge pages (``format.shard_file``), and the benchmarks warm the page
cache in huge folios (``benchmarks.workloads``)."""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

import pytest

from stream_plugin.format.shard_file import HUGE_PAGE_BYTES


def smaps_of(path: Path) -> dict[str, str]:
    """This process's smaps fields of its mapping of ``path``."""
    fields: dict[str, str] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:
            inside = len(head) == 6 and head[5] == str(path)
        elif inside and ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value.strip()
    return fields


def pmd_mapped_kib(path: Path) -> int:
    """KiB of ``path`` this process maps in huge pages after touching every page of it."""
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        sum(mapped[offset] for offset in range(0, len(mapped), 4096))
        return int(smaps_of(path)["FilePmdMapped"].split()[0])


def drop_from_page_cache(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())  # only clean pages can be dropped
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


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
