"""Shard files are mapped with MADV_HUGEPAGE (``format.shard_file``), so a shuffled pass over a shard
read in from a cold page cache pays one TLB miss per 2 MiB of it, not per 4 KiB."""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

import pytest
from support.huge_pages import drop_from_page_cache, require_huge_folios, smaps_of

from stream_plugin.format.index import FileInfo
from stream_plugin.format.shard_file import HUGE_PAGE_BYTES, MappedFile

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="huge pages of the page cache are Linux's")


@pytest.fixture
def huge_folios(tmp_path: Path) -> Path:
    return require_huge_folios(tmp_path)


@linux_only
@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no MADV_HUGEPAGE")
def test_a_shard_map_asks_for_huge_pages(tmp_path: Path) -> None:
    path = tmp_path / "shard"
    path.write_bytes(b"\0" * HUGE_PAGE_BYTES)
    mapped = MappedFile(tmp_path, FileInfo("shard", HUGE_PAGE_BYTES, {}), what="test file")
    try:
        assert "hg" in smaps_of(path)["VmFlags"].split()
    finally:
        mapped.close()


@linux_only
def test_a_shard_read_from_a_cold_page_cache_is_mapped_in_huge_pages(huge_folios: Path) -> None:
    path = huge_folios / "shard"
    with open(path, "wb", buffering=0) as handle:
        for _ in range(32):
            handle.write(os.urandom(1 << 17))  # 128 KiB writes: small folios while cached
    drop_from_page_cache(path)
    mapped = MappedFile(huge_folios, FileInfo("shard", 2 * HUGE_PAGE_BYTES, {}), what="test file")
    try:
        sum(mapped.view[offset] for offset in range(0, len(mapped.view), 4096))
        assert int(smaps_of(path)["FilePmdMapped"].split()[0]) > 0
    finally:
        mapped.close()
