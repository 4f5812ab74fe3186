"""Who decides an eviction: the rules, as pure functions of what a node's cache knows.

The cache's ``Evictor`` (files, locks, reservations) and ``stream-plugin simulate``'s engine (a model
of the same node) gather the same facts each in their own way and ask these functions what to do, so
the simulator cannot drift from the cache:

- ``room_to_make``: whether a download may make room now, and how many bytes it must evict;
- ``eviction_order``: which idle shard goes first, by the policy;
- ``victims_to_free``: how many of them go.

The facts: the bytes counted now (``usage``) and the limit; for a download *ahead* of need under
``eviction="belady"`` with a known future, also when its shard is read (``keep_before``), whether that is
within the reach ahead, whether the node reads a shard it holds neither cached nor downloading before
then, and whether idle shards remain for a download on demand (``Ahead``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from stream_plugin.cache.future import EvictionPolicy


@dataclass(frozen=True)
class Ahead:
    """What a download ahead of need knows under Belady with the node's future.

    The callables are asked only when the rule needs them (in the cache each costs file locks).
    """

    keep_before: int  # when the node reads its shard next: shards read by then stay
    within_reach: bool  # whether that is near enough for it to evict (the reach ahead)
    missing_before: Callable[[], bool]  # whether a shard read before then is neither cached nor downloading
    # whether at least this many bytes of cached shards are idle (no process reads or downloads them)
    idle_at_least: Callable[[int], bool]


def room_to_make(need: int, usage: int, limit: int, ahead: Ahead | None = None) -> int | None:
    """Bytes a download of ``need`` bytes must evict, with ``usage`` bytes counted under ``limit`` (0 or less:
    it fits now); None: a download ahead waits, evicting nothing.

    A download on demand (``ahead`` None) always makes what room it can. A download ahead waits:

    - while the node reads, before its shard, a shard it holds neither cached nor downloading:
      downloading in the order the node needs the shards keeps prefetching from costing downloads;
    - unless a download on demand of as much would still find room after it, free or idle: when readers
      pin every cached shard but one, a download ahead would take that one, and the next download on
      demand would have to evict the shard just brought in, before it is read;
    - when it must evict and its shard is read beyond the reach ahead.
    """
    excess = usage + need - limit
    if ahead is None:
        return excess
    if ahead.missing_before():
        return None
    wanted = need + excess  # idle bytes a download on demand needs once this one is placed
    if wanted > 0 and not ahead.idle_at_least(wanted):
        return None
    if excess > 0 and not ahead.within_reach:
        return None
    return excess


def eviction_order(
    policy: EvictionPolicy, count: int, next_uses: np.ndarray | None = None, keep_before: int | None = None
) -> np.ndarray:
    """The order in which ``policy`` evicts ``count`` idle candidates given least recently used first:
    indices into them, int64.

    ``"lru"``, or an unknown future (``next_uses`` None): as given. ``"belady"``: read again farthest
    ahead first (``NEVER`` first), least recently used first among equals; with ``keep_before`` (a
    download ahead of need, whose shard is read then), only the candidates read after that time.
    """
    if policy != "belady" or next_uses is None or not count:
        return np.arange(count, dtype=np.int64)
    farthest_first = np.argsort(-np.asarray(next_uses, dtype=np.int64), kind="stable")  # (count,)
    if keep_before is not None:
        farthest_first = farthest_first[next_uses[farthest_first] > keep_before]
    return farthest_first.astype(np.int64)


def victims_to_free(excess: int, sizes: Sequence[int], *, all_or_nothing: bool) -> int:
    """How many of the victims (``sizes``: their bytes, in eviction order) go to free ``excess`` bytes: the
    fewest from the first, or all of them when they cannot. ``all_or_nothing`` (a download ahead): none
    when they cannot, since a download ahead that cannot make room evicts nothing."""
    freed = 0
    for count, size in enumerate(sizes):
        if freed >= excess:
            return count
        freed += size
    return 0 if all_or_nothing and freed < excess else len(sizes)


__all__ = ["Ahead", "eviction_order", "room_to_make", "victims_to_free"]
