"""Shard files opened for reading: one read-only memory map per file and offset tables parsed once.

The size of every file is checked against ``index.json`` at open, so a truncated or replaced file fails
early with the shard's name instead of decoding garbage later.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stream_plugin.errors import ShardIntegrityError
from stream_plugin.format.index import FileInfo, ShardEntry

_UINT32 = struct.Struct("<I")
# The size of a huge page (a PMD on x86-64 and arm64 with 4 KiB pages): Linux maps a 2 MiB folio of a
# file's page cache with one page-table entry, so one TLB entry covers it.
HUGE_PAGE_BYTES = 2 << 20


def missing_file_error(path: Path, *, what: str) -> FileNotFoundError:
    """The error for a raw shard file that is not where the index says."""
    return FileNotFoundError(
        f"{path}: expected the {what} named in index.json, found no such file. Download or decompress "
        "the shard first (materialize_shard turns shard.*.zstd into the raw file), or check that the "
        "folder passed is the dataset folder that holds index.json"
    )


class MappedFile:
    """A whole file mapped read-only; ``view`` is a memoryview over it (empty files map to b'')."""

    def __init__(self, folder: str | os.PathLike[str], info: FileInfo, *, what: str) -> None:
        self.path = Path(folder) / info.basename
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - the map outlives this function
        except FileNotFoundError as error:
            raise missing_file_error(self.path, what=what) from error
        with handle:
            size = os.fstat(handle.fileno()).st_size
            if size != info.bytes:
                raise ShardIntegrityError(
                    f"{self.path}: expected {info.bytes} bytes as index.json records for this {what}, "
                    f"found {size}. The file is truncated, corrupt or from another dataset; delete it "
                    "and download it again"
                )
            # mmap refuses empty files; an empty JSON shard (0 samples) is legal.
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        if self._map is not None and size >= HUGE_PAGE_BYTES:
            map_in_huge_pages(self._map)
        self.view = memoryview(self._map) if self._map is not None else memoryview(b"")

    @property
    def raw(self) -> mmap.mmap | bytes:
        """The map itself: slicing it copies straight into a ``bytes`` (no intermediate view)."""
        return self._map if self._map is not None else b""

    def close(self) -> None:
        """Drop the mapping; views still held by callers keep it alive until they are released."""
        try:
            self.view.release()
            if self._map is not None:
                self._map.close()
        except BufferError:
            # Zero-copy arrays handed out still point into the map; it unmaps when they go away.
            pass
        self._map = None


def map_in_huge_pages(mapped: mmap.mmap) -> None:
    """Ask Linux to back ``mapped`` with huge pages where it can (``MADV_HUGEPAGE``).

    A shuffled pass reads each sample from a different 4 KiB page of a different shard, and every
    such page costs a TLB miss: with 1 KiB samples, a quarter of the CPU time per sample. With the
    advice, pages that are not yet cached are read in as 2 MiB folios and mapped 2 MiB at a time, in
    this process and every later one. Pages already cached stay in the folios they are in: a shard
    written in one piece (the writers) is in huge folios already; one written in smaller pieces (a
    download: writing huge folios made downloads about 1.7x slower here, so they do not) is mapped in
    4 KiB pages until the kernel evicts it. Elsewhere, or where the kernel refuses, nothing changes.
    """
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None:
        return
    with contextlib.suppress(OSError):  # a kernel without transparent huge pages
        mapped.madvise(advice)


def read_offset_table(buffer: memoryview, *, samples: int, source: str) -> np.ndarray:
    """Parse ``uint32 N, uint32 O[0..N]`` at the start of ``buffer``; returns O as int64."""
    if len(buffer) < 4:
        raise ShardIntegrityError(
            f"{source}: expected a header of at least 4 bytes, found {len(buffer)}; the file is "
            "truncated. Delete it and download it again"
        )
    (count,) = _UINT32.unpack_from(buffer, 0)
    if count != samples:
        raise ShardIntegrityError(
            f"{source}: expected {samples} samples as index.json says, found {count} in the file "
            "header. The file is corrupt or belongs to another index; download it again"
        )
    table_end = 4 + 4 * (count + 1)
    if len(buffer) < table_end:
        raise ShardIntegrityError(
            f"{source}: expected an offset table of {count + 1} entries ({table_end} bytes), found a "
            f"file of {len(buffer)} bytes; the file is truncated. Download it again"
        )
    return np.frombuffer(buffer, np.dtype("<u4"), count=count + 1, offset=4).astype(np.int64)


def check_offsets(offsets: np.ndarray, *, first: int | None, end: int, source: str) -> None:
    """Offsets must rise from ``first`` (or any start when None) to exactly ``end``."""
    ok = bool(offsets[-1] == end) and bool(np.all(offsets[1:] >= offsets[:-1]))
    if first is not None:
        ok = ok and bool(offsets[0] == first)
    if not ok:
        raise ShardIntegrityError(
            f"{source}: expected sample offsets rising from {first if first is not None else 'the header'} "
            f"to the data size {end}, found first={int(offsets[0])} last={int(offsets[-1])}. The file is "
            "corrupt; download it again"
        )


def config_bytes(config: Mapping[str, Any]) -> bytes:
    """The shard config stored in every MDS shard and JSON/CSV meta file, dumped as MosaicML does."""
    return json.dumps(config, sort_keys=True).encode("utf-8")


def build_meta(first_offset: int, samples: list[bytes], config: bytes) -> bytes:
    """A ``.meta`` file of the JSON/CSV formats: ``uint32 N``, ``uint32 O[0..N]`` into the data file, config."""
    count = len(samples)
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(np.fromiter(map(len, samples), np.int64, count), out=offsets[1:])
    offsets += first_offset
    if offsets[-1] >= 1 << 32:
        raise ShardIntegrityError(
            f"shard data file: expected at most {(1 << 32) - 1} bytes (offsets are uint32), found "
            f"{int(offsets[-1])}; lower size_limit"
        )
    return b"".join([_UINT32.pack(count), offsets.astype("<u4").tobytes(), config])


class SplitShardFiles:
    """The data and meta files of a JSON/CSV/TSV/XSV shard, mapped, with the meta's offsets parsed."""

    def __init__(
        self, entry: ShardEntry, folder: str | os.PathLike[str], *, first_offset: int | None
    ) -> None:
        if entry.raw_meta is None:
            raise ShardIntegrityError(
                f"{entry.format} shard {entry.raw_data.basename}: expected raw_meta in its index entry, "
                "found none; regenerate the index with a writer of this package or MosaicML Streaming"
            )
        self.data = MappedFile(folder, entry.raw_data, what=f"{entry.format} shard data file")
        try:
            meta = MappedFile(folder, entry.raw_meta, what=f"{entry.format} shard meta file")
            try:
                self.offsets = read_offset_table(meta.view, samples=entry.samples, source=str(meta.path))
            finally:
                meta.close()
            check_offsets(
                self.offsets, first=first_offset, end=len(self.data.view), source=str(self.data.path)
            )
        except BaseException:
            self.data.close()
            raise
        self.offset_list: list[int] = self.offsets.tolist()
        self.view = self.data.view

    def close(self) -> None:
        self.view = memoryview(b"")
        self.data.close()


class SplitShardReader:
    """Sample access shared by the JSON and CSV/TSV/XSV readers; subclasses define ``decode``."""

    entry: ShardEntry
    num_samples: int
    column_names: tuple[str, ...]

    def __init__(
        self, entry: ShardEntry, folder: str | os.PathLike[str], *, first_offset: int | None
    ) -> None:
        self.entry = entry
        self.num_samples = entry.samples
        self._source = f"{entry.format} shard {entry.raw_data.basename}"
        self._files = SplitShardFiles(entry, folder, first_offset=first_offset)

    def decode(self, data: bytes) -> dict[str, Any]:
        raise NotImplementedError

    def raw_sample(self, index: int) -> memoryview:
        """The undecoded bytes of one sample (one line, newline included)."""
        index = int(index)
        if not 0 <= index < self.num_samples:
            raise IndexError(
                f"{self._source}: expected a sample index in [0, {self.num_samples}), found {index}"
            )
        offsets = self._files.offset_list
        return self._files.view[offsets[index] : offsets[index + 1]]

    def read(self, index: int) -> dict[str, Any]:
        """Decode one sample."""
        return self.decode(bytes(self.raw_sample(index)))

    def read_many(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Decode several samples, in the order given."""
        return [self.read(index) for index in np.asarray(indices, np.int64).reshape(-1).tolist()]

    def read_columns(self, indices: Sequence[int] | np.ndarray) -> dict[str, np.ndarray | list[Any]]:
        """Decode several samples into one list per column."""
        samples = self.read_many(indices)
        return {name: [sample.get(name) for sample in samples] for name in self.column_names}

    def close(self) -> None:
        """Release the data file's map."""
        self._files.close()
