"""The node's forecast of a pass, computed by one process of the node and read by all the others.

Every process of a node (ranks x DataLoader workers) plans the same future: the node's reads of a pass
(``node_forecast``). At a million shards one plan costs most of a CPU second, so 64 processes would
pay it 64 times. The first process to need a pass's spans takes an exclusive file lock in the node's
cache folder, plans them and writes them; the others wait on the lock (in the kernel, as the cache's
locks do) and load the file. No coordinator: the ``local`` folder is already shared by the node.

A file is named by a digest of everything the spans depend on: the shard table's sample counts, the
order settings and the pass (epoch, start, batch sizes, canonical nodes, the node's band). A file that
cannot be read as the spans of this table (cut short, another version) is planned again in place.
Files of older passes are removed once more than ``_KEEP_FILES`` are there; lock files stay (empty), as
the cache's do: unlinking one while a process waits on it would let two holders lock two inodes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from stream_plugin.cache.locks import CONTROL_DIRNAME, locked
from stream_plugin.fileio import publish, temporary_sibling
from stream_plugin.redaction import get_logger

logger = get_logger(__name__)

Spans = tuple[np.ndarray, np.ndarray]  # (first, last): int64 (num_shards,) each
_KEEP_FILES = 8  # a few passes of every dataset sharing the folder


class SharedSpans:
    """Spans of passes shared through ``local/.stream_plugin/forecast/`` (see the module docstring)."""

    def __init__(self, local: str | os.PathLike[str], identity: str) -> None:
        self._folder = Path(local) / CONTROL_DIRNAME / "forecast"
        self._identity = identity

    @staticmethod
    def identity_of(samples_per_shard: np.ndarray, samples_per_stream: np.ndarray, settings: object) -> str:
        """What every pass of one dataset shares: its shards' sample counts, each stream's samples per
        epoch, and its order settings (a dataclass, whose repr names every field)."""
        digest = hashlib.blake2b(np.ascontiguousarray(samples_per_shard, dtype=np.int64).tobytes(), digest_size=16)
        digest.update(np.ascontiguousarray(samples_per_stream, dtype=np.int64).tobytes())
        digest.update(repr(settings).encode("utf-8"))
        return digest.hexdigest()

    def get(self, key: tuple[int, ...], num_shards: int, plan: Callable[[], Spans]) -> Spans:
        """The spans of the pass ``key``: read from the node's file, or planned (once per node) and written."""
        name = hashlib.blake2b(f"{self._identity}:{key}".encode(), digest_size=16).hexdigest()
        path = self._folder / f"{name}.npy"
        found = _load(path, num_shards)
        if found is not None:
            return found
        self._folder.mkdir(parents=True, exist_ok=True)
        with locked(self._folder / f"{name}.lock"):
            found = _load(path, num_shards)  # planned by another process while this one waited
            if found is not None:
                return found
            first, last = plan()
            temporary = temporary_sibling(path)
            try:
                with open(temporary, "wb") as handle:
                    np.save(handle, np.stack([first, last]))
                publish(temporary, path)
            finally:
                temporary.unlink(missing_ok=True)
        self._remove_old()
        return first, last

    def _remove_old(self) -> None:
        try:
            files = sorted(self._folder.glob("*.npy"), key=lambda path: path.stat().st_mtime_ns)
            for old in files[:-_KEEP_FILES]:
                old.unlink(missing_ok=True)
        except OSError as error:  # another process removed one first: nothing to do
            logger.debug("forecast files: %s", error)


def _load(path: Path, num_shards: int) -> Spans | None:
    """The spans in ``path``, or None where it is missing or not (2, num_shards) int64."""
    try:
        stacked = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if stacked.dtype != np.int64 or stacked.shape != (2, num_shards):
        return None
    return stacked[0], stacked[1]


__all__ = ["SharedSpans"]
