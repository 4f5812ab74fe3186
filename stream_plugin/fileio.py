"""Writing files: atomically (a file appears under its final name complete, or not at all), and in
whole huge pages (``open_in_huge_pages``), so that reading the file back through a memory map costs
one TLB entry per 2 MiB instead of one per 4 KiB."""

from __future__ import annotations

import io
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO, cast

# The size of a huge page (a PMD on x86-64 and arm64 with 4 KiB pages). Linux keeps a file's page cache
# in folios as large as the writes that filled it, and maps a whole 2 MiB folio with one page-table
# entry; a file written in 1 MiB pieces is mapped 4 KiB at a time for as long as it stays cached.
HUGE_PAGE_BYTES = 2 << 20


def temporary_sibling(path: str | os.PathLike[str]) -> Path:
    """Return a unique temporary name next to ``path``; hidden and tagged with the pid for debugging."""
    target = Path(path)
    return target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    A reader sees either the old file or the whole new one, never a prefix, even if this process is
    killed halfway. ``durable`` also fsyncs, for files whose loss after a power cut matters.
    """
    atomic_write_parts(path, [data], durable=durable)


def atomic_write_parts(
    path: str | os.PathLike[str], parts: Iterable[bytes | memoryview], *, durable: bool = False
) -> None:
    """``atomic_write_bytes`` of the concatenation of ``parts``, written one after another (a large
    file made of arrays is not first joined into one copy in memory)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_sibling(target)
    try:
        with open(temporary, "wb") as handle:
            for part in parts:
                handle.write(part)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


class HugePageWriter(io.BufferedIOBase):
    """A binary file opened for writing whose writes reach the OS in whole ``HUGE_PAGE_BYTES`` pieces,
    each starting at a multiple of it (the last piece is what is left). Made by ``open_in_huge_pages``.

    Downloads arrive in pieces of whatever size the network or the client library hands over (1 MiB,
    64 KiB, uneven); written as they come, their page cache is small folios. Buffered to the next
    2 MiB boundary instead, the page cache holds huge folios, and every process that maps the shard
    later maps it in huge pages. Holds at most ``HUGE_PAGE_BYTES`` in memory.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self._file = open(path, "wb", buffering=0)  # noqa: SIM115 - closed by close()
        self._pending = bytearray()
        self._written = 0  # bytes handed to the OS: the file position of _pending's first byte

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._file.fileno()

    def tell(self) -> int:
        return self._written + len(self._pending)

    def write(self, data: Any) -> int:
        if self.closed:
            raise ValueError("write to closed file")
        view = memoryview(data).cast("B")
        size = len(view)
        pending = self._pending
        boundary = self._written + len(pending) + size
        whole_end = boundary - boundary % HUGE_PAGE_BYTES  # the last boundary these bytes reach
        if whole_end <= self._written:  # no boundary reached: keep them
            pending += view
            return size
        direct = whole_end - self._written - len(pending)  # bytes of ``data`` up to that boundary
        if pending:
            pending += view[:direct]
            self._write_all(memoryview(pending))
            pending.clear()
        else:
            self._write_all(view[:direct])
        pending += view[direct:]
        return size

    def flush(self) -> None:
        """Hand what is pending to the OS (a piece that ends short of a boundary)."""
        if self._pending:
            self._write_all(memoryview(self._pending))
            self._pending.clear()

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
        finally:
            self._file.close()
            super().close()

    def _write_all(self, view: memoryview) -> None:
        while view:
            written = self._file.write(view)
            assert written is not None  # a blocking file
            self._written += written
            view = view[written:]


def open_in_huge_pages(path: str | os.PathLike[str]) -> BinaryIO:
    """Open ``path`` for writing (created or truncated) with writes in whole huge pages
    (``HugePageWriter``): for shard files, which are read back through memory maps. Typed as the
    binary file that client libraries (``download_to_file``, ``readinto``) expect."""
    return cast(BinaryIO, HugePageWriter(path))


def copy_in_huge_pages(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """Copy ``source`` to ``dest`` (created or truncated) in whole huge pages: ``shutil.copyfile``
    copies inside the kernel in small pieces, which leaves the copy's page cache in small folios."""
    buffer = bytearray(HUGE_PAGE_BYTES)
    with open(source, "rb", buffering=0) as reader, open_in_huge_pages(dest) as writer:
        while count := reader.readinto(buffer):
            writer.write(memoryview(buffer)[:count])


def publish(temporary: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Move a finished temporary file to its final name in one atomic step."""
    os.replace(temporary, path)


__all__ = [
    "HUGE_PAGE_BYTES",
    "HugePageWriter",
    "atomic_write_bytes",
    "copy_in_huge_pages",
    "open_in_huge_pages",
    "publish",
    "temporary_sibling",
]
