"""Small datasets for tests: every sample carries its global ``id`` so orders can be compared."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stream_plugin import MDSWriter


def write_ids(folder: Path, ids: Sequence[int], *, size_limit: int = 1 << 12, payload: int = 40) -> Path:
    """An MDS stream whose samples are ``{"id": i, "data": bytes}`` for each i in ``ids``."""
    with MDSWriter(out=str(folder), columns={"id": "int", "data": "bytes"}, size_limit=size_limit) as writer:
        for sample_id in ids:
            writer.write({"id": int(sample_id), "data": bytes([sample_id % 251]) * payload})
    return folder


def write_streams(root: Path, sizes: Sequence[int], **kwargs: object) -> list[Path]:
    """One stream per size under ``root``; ids are global and consecutive across streams."""
    folders = []
    start = 0
    for number, size in enumerate(sizes):
        folders.append(write_ids(root / f"stream{number}", range(start, start + size), **kwargs))  # type: ignore[arg-type]
        start += size
    return folders
