"""Shard files are written in whole huge pages and mapped with MADV_HUGEPAGE (``fileio``,
``format.shard_file``), so a shuffled pass pays one TLB miss per 2 MiB of a shard, not per 4 KiB."""

from __future__ import annotations

import mmap
import os
import random
import sys
from pathlib import Path

import pytest
from support.huge_pages import drop_from_page_cache, pmd_mapped_kib, require_huge_folios, smaps_of

from stream_plugin.fileio import HUGE_PAGE_BYTES, HugePageWriter, copy_in_huge_pages, open_in_huge_pages
from stream_plugin.format.index import FileInfo
from stream_plugin.format.shard_file import MappedFile

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="huge pages of the page cache are Linux's")


class _Recorder:
    """Stands in for the writer's file: records where each write to the OS starts and how long it is."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.writes: list[tuple[int, int]] = []

    def write(self, view: memoryview) -> int:
        taken = min(len(view), 3 << 20)  # a partial write now and then, as the OS may do
        self.writes.append((len(self.data), taken))
        self.data += view[:taken]
        return taken

    def close(self) -> None:
        pass


@pytest.fixture
def huge_folios(tmp_path: Path) -> Path:
    return require_huge_folios(tmp_path)


def test_the_huge_page_writer_hands_the_os_whole_aligned_pieces_whatever_the_pieces_it_is_given(tmp_path: Path) -> None:
    data = os.urandom(5 * HUGE_PAGE_BYTES + 12345)
    writer = HugePageWriter(tmp_path / "out")
    recorder = _Recorder()
    writer._file.close()
    writer._file = recorder  # type: ignore[assignment]
    chunks = random.Random(0)
    position = 0
    while position < len(data):
        size = chunks.choice([1, 4096, 65536, 1 << 20, 3 * 65536 + 7, 3 << 20])
        assert writer.write(data[position : position + size]) == len(data[position : position + size])
        position += size
        assert writer.tell() == min(position, len(data))
    writer.close()
    assert bytes(recorder.data) == data
    *whole, last = recorder.writes
    for start, length in whole:
        assert start % HUGE_PAGE_BYTES == 0 or (start + length) % HUGE_PAGE_BYTES == 0
        assert (start + length) % HUGE_PAGE_BYTES == 0 or length == 3 << 20  # only the OS cut it short
    assert last[0] + last[1] == len(data)


def test_the_huge_page_writer_keeps_to_the_boundaries_after_a_flush_mid_way(tmp_path: Path) -> None:
    path = tmp_path / "out"
    with open_in_huge_pages(path) as writer:
        writer.write(b"a" * 1000)
        writer.flush()  # a short piece reaches the OS: 1000 bytes
        writer.write(b"b" * HUGE_PAGE_BYTES)
        assert writer.tell() == 1000 + HUGE_PAGE_BYTES
        assert os.path.getsize(path) == HUGE_PAGE_BYTES  # up to the first boundary, no further
    assert path.read_bytes() == b"a" * 1000 + b"b" * HUGE_PAGE_BYTES


def test_the_huge_page_writer_refuses_a_write_after_close(tmp_path: Path) -> None:
    writer = open_in_huge_pages(tmp_path / "out")
    writer.close()
    with pytest.raises(ValueError, match="closed file"):
        writer.write(b"x")


@linux_only
def test_a_file_written_in_small_pieces_through_the_huge_page_writer_is_mapped_in_huge_pages(huge_folios: Path) -> None:
    data = os.urandom(4 * HUGE_PAGE_BYTES)
    plain, huge = huge_folios / "plain", huge_folios / "huge"
    with open(plain, "wb", buffering=0) as plain_file, open_in_huge_pages(huge) as huge_file:
        for start in range(0, len(data), 1 << 20):  # 1 MiB pieces, as the downloads get them
            plain_file.write(data[start : start + (1 << 20)])
            huge_file.write(data[start : start + (1 << 20)])
    assert pmd_mapped_kib(plain) == 0  # what the writer is for: 1 MiB writes leave small folios
    assert pmd_mapped_kib(huge) == len(data) // 1024


@linux_only
def test_a_copy_in_huge_pages_is_mapped_in_huge_pages(huge_folios: Path) -> None:
    source = huge_folios / "source"
    source.write_bytes(os.urandom(2 * HUGE_PAGE_BYTES + 100))
    copy_in_huge_pages(source, huge_folios / "copy")
    assert (huge_folios / "copy").read_bytes() == source.read_bytes()
    assert pmd_mapped_kib(huge_folios / "copy") == 2 * HUGE_PAGE_BYTES // 1024


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


@linux_only
@pytest.mark.parametrize("codec", ["zstd", "gz"])
def test_a_decompressed_shard_is_mapped_in_huge_pages(huge_folios: Path, codec: str) -> None:
    from stream_plugin.format.compression import compress, decompress_file

    data = os.urandom(HUGE_PAGE_BYTES) * 2  # decompressed in 1 MiB pieces
    (huge_folios / "shard.mds.z").write_bytes(compress(codec, data))
    written = decompress_file(codec, huge_folios / "shard.mds.z", huge_folios / "shard.mds", expected_size=len(data))
    assert written == len(data)
    assert (huge_folios / "shard.mds").read_bytes() == data
    assert pmd_mapped_kib(huge_folios / "shard.mds") == len(data) // 1024
