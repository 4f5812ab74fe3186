"""The benchmark datasets: the same samples written once in each library's own format, reused across runs.

A workload is ``count`` samples ``{"id": int, "data": bytes}`` with random ``data`` payloads of ``size``
bytes, read in batches of ``batch_size``. Each library reads its own copy: ours and MosaicML's MDS (each
written by its own ``MDSWriter``) and litdata's chunks (written by its ``BinaryWriter``). Shards and
chunks are capped at the same ``shard_bytes`` for all of them: ``SHARD_BYTES``, or four samples where
samples are larger. A finished copy carries a marker, so a later run skips the writing.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stream_plugin.format.shard_file import HUGE_PAGE_BYTES

COLUMNS = {"id": "int", "data": "bytes"}
SHARD_BYTES = 1 << 24  # 16 MiB: enough shards (32 for 500 MB) that 4 simulated nodes each get several
_MARKER = ".benchmark-complete"

OURS = "stream_plugin"
MOSAICML = "mosaicml-streaming"
LITDATA = "litdata"
BARE = "bare mmap"
PEERS = (MOSAICML, LITDATA)


@dataclass(frozen=True)
class Workload:
    """``count`` samples with ``size``-byte payloads, read ``batch_size`` at a time."""

    count: int
    size: int
    batch_size: int = 256

    @property
    def shard_bytes(self) -> int:
        return max(SHARD_BYTES, 4 * self.size)

    @property
    def name(self) -> str:
        return f"{_short(self.count)} x {_bytes_label(self.size)}"

    @property
    def slug(self) -> str:
        return f"{self.count}x{self.size}"

    @property
    def payload_bytes(self) -> int:
        return self.count * self.size


def _short(count: int) -> str:
    for unit, scale in (("M", 10**6), ("k", 10**3)):
        if count >= scale and count % scale == 0:
            return f"{count // scale}{unit}"
    return f"{count:,}"


def _bytes_label(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


SMALL_SAMPLES = Workload(500_000, 1024)
LARGE_SAMPLES = Workload(10_000, 100 * 1024)
# Large images and audio, and video clips: fewer samples per batch (16 MiB and 32 MiB batches; a worker
# holds two in flight), and few samples, so that every library's copy fits the bench machine's disk.
MIB_SAMPLES = Workload(128, 1 << 20, batch_size=16)
HUGE_SAMPLES = Workload(12, 16 << 20, batch_size=2)
FULL_WORKLOADS = (SMALL_SAMPLES, LARGE_SAMPLES, MIB_SAMPLES, HUGE_SAMPLES)
SMOKE_WORKLOADS = (Workload(4_000, 1024),)


def payload(index: int, size: int, pool: bytes) -> bytes:
    """Sample ``index``'s payload: a window of a random pool, so samples differ and set-up stays cheap."""
    start = (index * 7919) % (len(pool) - size)
    return pool[start : start + size]


def payload_pool(size: int, seed: int = 0) -> bytes:
    return (
        np.random.default_rng(seed).integers(0, 256, size=max(size * 64, 1 << 20), dtype=np.uint8).tobytes()
    )


def default_data_root() -> Path:
    return Path(os.environ.get("BENCH_DATA_DIR", Path(tempfile.gettempdir()) / "stream-plugin-bench"))


def folder_for(root: Path, workload: Workload, library: str) -> Path:
    """The local copy that ``library`` reads (the bare ceiling reads our MDS files)."""
    fmt = {OURS: "mds-ours", BARE: "mds-ours", MOSAICML: "mds-mosaicml", LITDATA: "litdata"}[library]
    return root / workload.slug / fmt


def dataset_bytes(folder: Path) -> int:
    """Bytes of every file of a written dataset (shards plus index)."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and path.name != _MARKER)


def warm_page_cache(folder: Path, chunk: int = 8 << 20, *, small_folios: bool = False) -> int:
    """Bring every file of ``folder`` into the page cache as writing it left it, so that a "warm local
    cache" measurement finds the whole dataset cached; returns the bytes brought in.

    Without it the first library measured after another workload pays for the disk reads: this
    machine's page cache holds only about 4 GB, less than all workloads together, and reading in order
    then shows major faults that a shuffled read moments later does not.

    How the files come back matters to the readers that map them (ours and the bare reader). Every
    library's writer writes a shard in one ``write``, which Linux keeps in huge (2 MiB) folios, mapped
    with one TLB entry each. Read back with ``read`` after eviction, a file comes back in small folios
    instead, and a shuffled pass through a map then pays a TLB miss per 4 KiB page. So on Linux each
    file is read through a map with ``MADV_HUGEPAGE``, after dropping it from the page cache if it is
    held in small folios: the state writing the dataset leaves. Elsewhere it is read with ``read``.
    ``small_folios=True`` measures the other state: each file dropped and read back with ``read``.
    """
    total = 0
    buffer = bytearray(chunk)
    huge_pages = sys.platform == "linux" and hasattr(mmap, "MADV_HUGEPAGE")
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        if huge_pages and not small_folios and path.stat().st_size >= HUGE_PAGE_BYTES:
            total += _warm_in_huge_pages(path)
            continue
        if huge_pages and small_folios:
            drop_from_page_cache(path)
        with open(path, "rb", buffering=0) as file:
            while read := file.readinto(buffer):
                total += read
    return total


def _warm_in_huge_pages(path: Path) -> int:
    """Touch every page of ``path`` through an advised map; once more after dropping the file from
    the page cache if it came back mapped in small pages. Returns the file's size."""
    for attempt in range(2):
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            mapped.madvise(mmap.MADV_HUGEPAGE)
            for offset in range(0, len(mapped), 4096):
                mapped[offset]
            huge = pmd_mapped_bytes(path)
            if attempt or huge >= len(mapped) - len(mapped) % HUGE_PAGE_BYTES - HUGE_PAGE_BYTES:
                return len(mapped)
        drop_from_page_cache(path)
    raise AssertionError("unreachable")


def drop_from_page_cache(path: Path) -> None:
    """Let the kernel drop ``path``'s pages from the page cache (written back first: only clean pages go)."""
    with open(path, "rb") as file:
        os.fsync(file.fileno())  # a no-op for a dataset written long ago
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def smaps_of(path: Path) -> dict[str, str]:
    """This process's ``/proc/self/smaps`` fields of its (last) mapping of ``path``; empty if unmapped."""
    fields: dict[str, str] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:
            inside = len(head) == 6 and head[5] == str(path.resolve())
        elif inside and ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value.strip()
    return fields


def pmd_mapped_bytes(path: Path) -> int:
    """Bytes of ``path`` this process maps in huge pages (``FilePmdMapped`` of its mapping)."""
    return int(smaps_of(path).get("FilePmdMapped", "0 kB").split()[0]) * 1024


def prepare(root: Path, workload: Workload, libraries: tuple[str, ...]) -> dict[str, Path]:
    """Write ``workload`` for each library that lacks a finished copy; return each library's folder."""
    folders = {}
    for library in libraries:
        folder = folder_for(root, workload, library)
        marker = folder / _MARKER
        expected = json.dumps(
            {"count": workload.count, "size": workload.size, "shard_bytes": workload.shard_bytes}
        )
        if not (marker.exists() and marker.read_text() == expected):
            shutil.rmtree(folder, ignore_errors=True)
            _WRITERS[folder_format(library)](folder, workload)
            marker.write_text(expected)
        folders[library] = folder
    return folders


def folder_format(library: str) -> str:
    return {OURS: "ours", BARE: "ours", MOSAICML: "mosaicml", LITDATA: "litdata"}[library]


def _samples(workload: Workload) -> Iterator[dict[str, object]]:
    pool = payload_pool(workload.size)
    for index in range(workload.count):
        yield {"id": index, "data": payload(index, workload.size, pool)}


def _write_ours(folder: Path, workload: Workload) -> None:
    from stream_plugin import MDSWriter

    with MDSWriter(out=str(folder), columns=COLUMNS, size_limit=workload.shard_bytes) as writer:
        for sample in _samples(workload):
            writer.write(sample)


def _write_mosaicml(folder: Path, workload: Workload) -> None:
    from streaming import MDSWriter as MosaicMDSWriter

    with MosaicMDSWriter(out=str(folder), columns=COLUMNS, size_limit=workload.shard_bytes) as writer:
        for sample in _samples(workload):
            writer.write(sample)


def _write_litdata(folder: Path, workload: Workload) -> None:
    from litdata.streaming.writer import BinaryWriter

    folder.mkdir(parents=True)
    writer = BinaryWriter(str(folder), chunk_bytes=workload.shard_bytes)
    for index, sample in enumerate(_samples(workload)):
        writer[index] = sample
    writer.done()
    writer.merge()


_WRITERS = {"ours": _write_ours, "mosaicml": _write_mosaicml, "litdata": _write_litdata}
