"""Pause Python's cyclic garbage collector around a burst of allocations that hold no cycles to free.

In a process that has imported torch, the collector tracks a couple of hundred thousand objects. A
burst of young objects (a boto3 client loads its service model: tens of thousands of dicts; a large
``index.json``) advances the collector's counters until a full collection over all of them runs, about
70 ms on these machines: most of the time to the first sample from a cold cache. Pausing the
collector for the burst turns its many young collections into one, so the full one does not come due.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """Disable the collector for the block; it comes back on only if it was on (and nobody else's
    block turned it off first), so nesting and callers that disabled it themselves are respected."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
