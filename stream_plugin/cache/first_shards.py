"""``first_shards``: at most K of a node's first-shard downloads at once, against a start-up storm.

When every reader of a node starts at once, each asks for its first shard in the same second: with
many ranks x workers, that is a burst of requests on the store (a rate limit answers 429) and a link
split so many ways that every reader waits for the slowest. With ``first_shards`` K, the rule is:

* a process's download made before that process has its first shard takes one of K node slots, and
  gives it back when the download ends (a shard it finds cached, or a download of its that ended,
  is its first shard: from then on its downloads take no slot);
* every other download takes no slot.

The slots are K empty lock files in the cache's control folder (``ControlFolder.first_shard_slot``),
taken with ``flock`` as ``cache/locks.py`` coordinates, so every rank and DataLoader worker caching
into that folder shares them, with no coordinator; the kernel frees a dead holder's slot. A download
first tries every slot without waiting; when all are taken it waits in the kernel on one (chosen by
its process and thread), so nothing polls. Streams cached in different folders have a cap each. The
simulator follows the same rule (``simulate.engine``: a reader's first-shard download takes one of K
node slots, others take none). None, the default, caps nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from stream_plugin.cache.locks import ControlFolder, locked, try_locked
from stream_plugin.errors import check_int

_FIX = "pass e.g. first_shards=4 (None, the default, lets every reader download its first shard at once)"


def check_first_shards(count: object) -> int | None:
    """``count`` as an int >= 1 or None, or a ``ConfigError`` that says the fix."""
    return check_int("first_shards", count, minimum=1, allow_none=True, fix=_FIX)


def preferred_slot(count: int, pid: int, thread: int) -> int:
    """The slot a download waits on when all are taken: spread by process and thread."""
    return (pid * 31 + thread) % count


@contextmanager
def hold_slot(control: ControlFolder, count: int) -> Iterator[int]:
    """Hold one of ``control``'s ``count`` first-shard slots for the body; yields its index."""
    for index in range(count):
        with try_locked(control.first_shard_slot(index)) as held:
            if held:
                yield index
                return
    index = preferred_slot(count, os.getpid(), threading.get_ident())
    with locked(control.first_shard_slot(index)):  # waits in the kernel for that slot's holder
        yield index


class FirstShards:
    """One process's side of the cap: whether it has its first shard yet, shared by its streams' caches.

    ``reached`` is called when the process finds a shard cached or a download of its ends; ``slot``
    wraps a download: it holds a slot only while the process has no first shard.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.reached = False

    def reach(self) -> None:
        """The process has a shard to read: its later downloads take no slot."""
        self.reached = True

    @contextmanager
    def slot(self, control: ControlFolder) -> Iterator[None]:
        """Hold a slot of ``control``'s folder for a download, if this process has no first shard yet."""
        if self.reached:
            yield
            return
        with hold_slot(control, self.count):
            yield
        self.reached = True  # the download ended: the process has its first shard


__all__ = ["FirstShards", "check_first_shards", "hold_slot", "preferred_slot"]
