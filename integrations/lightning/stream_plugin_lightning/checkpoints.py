"""Checkpoint files: an atomic save through the Trainer, and finding the newest complete checkpoint.

Lightning writes a checkpoint through an fsspec transaction whose temporary file lives in the system
temp folder; when that is another file system the final move is a copy, and a process killed during it
leaves a truncated file under the final name. Here the temporary file is a sibling of the target, so
the rename is atomic, and it is fsynced first, so the rename never exposes unwritten bytes.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import lightning.pytorch as pl

from stream_plugin.fileio import publish


def save_checkpoint_atomically(trainer: pl.Trainer, path: str | os.PathLike[str]) -> Path:
    """Save a full checkpoint to ``path`` so that it appears complete or not at all; call on every rank.

    ``trainer.save_checkpoint`` is collective (rank 0 writes, then all ranks meet at a barrier); the rename
    happens on rank 0 before the final barrier, so every rank returns after the file is in place. Made for
    single-file checkpoints (DDP, single device), not for sharded checkpoint folders.
    """
    target = Path(path)
    if trainer.is_global_zero:
        target.parent.mkdir(parents=True, exist_ok=True)
    # The same name on every rank: strategies that write shards on all ranks need one path.
    temporary = target.with_name(f".{target.name}.tmp-saving")
    trainer.save_checkpoint(temporary)
    if trainer.is_global_zero:
        try:
            _fsync_file(temporary)
            publish(temporary, target)
            _fsync_directory(target.parent)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    trainer.strategy.barrier("stream_plugin_lightning.save_checkpoint_atomically")
    return target


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _fsync_directory(path: Path) -> None:
    # Makes the rename itself durable; not every platform can open a directory.
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def is_complete_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a whole ``torch.save`` zip archive (a truncated file has no central directory)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/data.pkl") or name == "data.pkl" for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def latest_checkpoint(dirpath: str | os.PathLike[str], pattern: str = "*.ckpt") -> str | None:
    """The newest complete checkpoint in ``dirpath`` (by modification time), or None if there is none.

    Use it as ``trainer.fit(..., ckpt_path=latest_checkpoint(dirpath))``: the first run of a job finds
    nothing and starts fresh; a restarted one continues from the newest checkpoint that is not truncated.
    """
    folder = Path(dirpath)
    if not folder.is_dir():
        return None
    candidates = []
    for path in folder.glob(pattern):
        try:
            if path.is_file():
                candidates.append((path.stat().st_mtime_ns, path.name, path))
        except OSError:
            continue  # removed while we looked
    for _, _, path in sorted(candidates, reverse=True):
        if is_complete_checkpoint(path):
            return str(path)
    return None
