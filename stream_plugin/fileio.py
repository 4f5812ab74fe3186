"""Atomic file creation: a file appears under its final name complete, or not at all."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from pathlib import Path


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


def publish(temporary: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Move a finished temporary file to its final name in one atomic step."""
    os.replace(temporary, path)


__all__ = ["atomic_write_bytes", "publish", "temporary_sibling"]
