"""What this node will read, and when: the value that Belady eviction ranks shards by.

Every process of a node can compute the node's whole read order from the sample order (no messages),
so every process can tell, for each shard, when the node reads it next. ``NodeFuture`` keeps that at
shard level: for each pass of the horizon (an epoch, say) the first and last time the node reads
each shard, not a per-sample array. Times are positions on one node clock (see ``reading``'s
``node_forecast``): larger is later, and a later pass's times are all larger than an earlier one's.

Between the first and last read of a pass a shard counts as in use: its next use is "now".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from stream_plugin.errors import ConfigError

EvictionPolicy = Literal["belady", "lru"]
# The choices of ``eviction``, from the Literal: the one list of them.
EVICTION_POLICIES: tuple[str, ...] = get_args(EvictionPolicy)

# The next use of a shard the node does not read within the known horizon.
NEVER = np.iinfo(np.int64).max


def check_eviction(value: object) -> EvictionPolicy:
    """``value`` as an eviction policy; ``ConfigError`` naming the choices otherwise."""
    if not isinstance(value, str) or value not in EVICTION_POLICIES:
        raise ConfigError(
            f"eviction: expected one of {list(EVICTION_POLICIES)}, found {value!r}; pass 'belady' to evict the "
            "shard this node reads again last, or 'lru' to evict the least recently used one"
        )
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class NodeFuture:
    """When this node reads each shard, pass by pass: the shard-level spans of its read order.

    ``first`` and ``last`` are int64 (passes, num_shards): in pass ``i`` the node reads shard ``s`` from
    time ``first[i, s]`` to time ``last[i, s]``; both are ``NEVER`` where it does not read it in that pass.
    """

    first: np.ndarray
    last: np.ndarray

    def __post_init__(self) -> None:
        if self.first.shape != self.last.shape or self.first.ndim != 2:
            raise ConfigError(
                f"NodeFuture: expected first and last of one shape (passes, num_shards), found "
                f"{self.first.shape} and {self.last.shape}; build it with NodeFuture.from_reads"
            )

    @property
    def num_shards(self) -> int:
        return int(self.first.shape[1])

    @classmethod
    def from_reads(
        cls, num_shards: int, passes: Iterable[Iterable[tuple[np.ndarray, np.ndarray]]]
    ) -> NodeFuture:
        """The spans of ``passes``: each an iterable of pieces ``(times (n,), shard ids (n,))`` of the
        node's reads. Only (num_shards,) arrays are kept, whatever the length of the passes."""
        return cls.of_spans(num_shards, [read_spans(num_shards, pieces) for pieces in passes])

    @classmethod
    def of_spans(cls, num_shards: int, spans: Sequence[tuple[np.ndarray, np.ndarray]]) -> NodeFuture:
        """The future of passes given as ``(first, last)`` pairs (``read_spans``), earliest first."""
        if not spans:
            empty = np.zeros((0, num_shards), dtype=np.int64)
            return cls(empty, empty.copy())
        return cls(np.stack([first for first, _ in spans]), np.stack([last for _, last in spans]))

    def next_use(self, shards: np.ndarray, now: int, until: int | None = None) -> np.ndarray:
        """When the node next reads each of ``shards`` (int ids, (k,)) from time ``now`` on: ``now`` for a
        shard inside one of its spans, ``NEVER`` for one not read again within the horizon. (k,) int64.

        ``until`` (>= ``now``): the node may be anywhere in ``[now, until]`` (a process's clock trails the
        node's reads); a shard read at some time in that window counts as read at ``until``, as one in use.
        """
        shards = np.asarray(shards, dtype=np.int64)
        if not len(self.first):
            return np.full(len(shards), NEVER, dtype=np.int64)
        return span_next_use(self.first[:, shards], self.last[:, shards], now, until).min(axis=0)  # (k,)


def span_next_use(first: np.ndarray, last: np.ndarray, now: int, until: int | None = None) -> np.ndarray:
    """The rule behind ``NodeFuture.next_use``, span by span: when each span ``[first, last]`` is next
    read from ``now`` on (``NEVER`` once it is over or for a ``NEVER`` span), any shape, int64.

    A span under way, or begun by ``until``, counts as read at ``until`` (``now`` without one). A shard's
    next use is the least over its spans: passes follow one another, so the earliest pass not over
    wins. The cache ranks shards by it, and ``stream-plugin simulate`` calls it with its own spans.
    """
    until = now if until is None else max(until, now)
    first = np.asarray(first, dtype=np.int64)
    last = np.asarray(last, dtype=np.int64)
    return np.where((last >= now) & (last != NEVER), np.maximum(first, until), NEVER)


def read_spans(
    num_shards: int, pieces: Iterable[tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """``(first, last)`` read time of each shard in one pass given as pieces ``(times (n,), shard ids
    (n,))``: int64 (num_shards,) each, ``NEVER`` for a shard the pass does not read."""
    first = np.full(num_shards, NEVER, dtype=np.int64)  # (num_shards,)
    last = np.full(num_shards, -1, dtype=np.int64)  # (num_shards,)
    for times, shards in pieces:
        np.minimum.at(first, shards, times)
        np.maximum.at(last, shards, times)
    last[first == NEVER] = NEVER
    return first, last


def shifted(spans: tuple[np.ndarray, np.ndarray], by: int) -> tuple[np.ndarray, np.ndarray]:
    """``spans`` (``read_spans``) ``by`` later on the clock; ``NEVER`` stays ``NEVER``."""
    first, last = spans
    read = first != NEVER
    return np.where(read, first + by, NEVER), np.where(read, last + by, NEVER)


__all__ = [
    "EVICTION_POLICIES",
    "NEVER",
    "EvictionPolicy",
    "NodeFuture",
    "check_eviction",
    "read_spans",
    "shifted",
    "span_next_use",
]
