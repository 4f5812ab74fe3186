"""A shard's files in the ``local`` folder: where its temporaries go, whether it is present, and
whether a file matches what ``index.json`` records.

Temporaries are named ``.<name>.tmp-locked``: only the holder of the shard lock writes them, so the
next holder can remove a killed process's leftovers without scanning the folder.
"""

from __future__ import annotations

from pathlib import Path

from stream_plugin.errors import ShardIntegrityError
from stream_plugin.format.hashing import verify_digests
from stream_plugin.format.index import FileInfo, ShardEntry


def temporary(path: Path) -> Path:
    """Where the file ``path`` is written before it is renamed into place."""
    return path.with_name(f".{path.name}.tmp-locked")


def has_size(path: Path, size: int) -> bool:
    """Whether ``path`` exists with ``size`` bytes."""
    try:
        return path.stat().st_size == size
    except FileNotFoundError:
        return False


def is_present(local: Path, entry: ShardEntry) -> bool:
    """Whether every raw file of the shard is in ``local`` with the size ``index.json`` records."""
    return all(has_size(local / raw.basename, raw.bytes) for raw, _ in entry.file_pairs())


def remove_temporaries(local: Path, entry: ShardEntry) -> None:
    """Remove the shard's temporaries; the caller holds the shard lock, so any left belong to a holder
    that died."""
    for raw, stored in entry.file_pairs():
        for info in (raw, stored):
            if info is not None:
                temporary(local / info.basename).unlink(missing_ok=True)


def verify_file(info: FileInfo, path: Path, validate_hash: str | None, *, required: bool) -> None:
    """Check size, then the ``validate_hash`` digest (``required``: the index must record it)."""
    found = path.stat().st_size
    if found != info.bytes:
        raise ShardIntegrityError(
            f"{info.basename}: expected {info.bytes} bytes (from index.json), found {found}; the download "
            "was cut short or the remote file differs from the index"
        )
    if validate_hash is not None and (required or validate_hash in info.hashes):
        verify_digests(info.hashes, path, source=info.basename, names=[validate_hash])


__all__ = ["has_size", "is_present", "remove_temporaries", "temporary", "verify_file"]
