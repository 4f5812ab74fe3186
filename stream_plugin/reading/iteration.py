"""The per-sample hot loop: turn a worker's shard ids and offsets into decoded samples, in order.

Shard lookups are vectorised by the caller; the loop itself only switches readers when the shard
changes, and moves the prefetch window in strides. It receives exactly what it needs (shard access,
shard ids and offsets, the predownload count, and a per-sample function), never the dataset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream_plugin.cache.prefetch import Prefetcher
from stream_plugin.reading.shard_access import ShardAccess

Read = Callable[[int], Any]  # an open shard reader's read(offset)
# When a subclass overrides how a sample is fetched, each sample comes from ``fetch(sample_id)``
# instead of ``read(offset)``; just before, the loop puts ``[sample_id, read, offset]`` in ``slot``, where
# the dataset's own ``get_item`` finds it (so a subclass's ``super().get_item(i)`` needs no lookup).
Fetch = Callable[[int], Any]


@dataclass(frozen=True)
class PerSample:
    """Fetch each sample through ``fetch``: the global ``sample_ids`` of the pass, and the ``slot``."""

    sample_ids: np.ndarray
    fetch: Fetch
    slot: list[Any]

_CHUNK = 1 << 16


def _rows(*columns: np.ndarray) -> Iterator[tuple[int, ...]]:
    """The columns' values side by side, as Python ints, converted a chunk at a time.

    Converting the whole rest of an epoch up front would make the first sample after a resume wait
    (and the process hold the lists) in proportion to how much of the epoch is left.
    """
    for start in range(0, len(columns[0]), _CHUNK):
        yield from zip(*(column[start : start + _CHUNK].tolist() for column in columns))


def read_samples(
    access: ShardAccess,
    shard_ids: np.ndarray,
    offsets: np.ndarray,
    *,
    predownload: int | None,
    per_sample: PerSample | None = None,
    more: Callable[[], np.ndarray | None] | None = None,
) -> Iterator[Any]:
    """Yield the samples at ``(shard_ids[i], offsets[i])`` in order, prefetching the shards they need.

    With ``per_sample``, sample ``i`` is ``per_sample.fetch(sample_ids[i])`` (a subclass that overrides
    ``get_item``), its reader and offset put in ``per_sample.slot`` first. ``more()`` gives the shard ids
    of the samples read after these (the next piece of the pass), to prefetch them in time.
    """
    # Moving the prefetch window costs Python work per sample it covers, so move it in strides.
    stride = max(1, (predownload or 512) // 8)
    num_shards = access.num_shards
    with access.prefetch(shard_ids, predownload=predownload, more=more) as prefetcher:
        if num_shards <= access.max_open:
            reads = _lazy_reads(access, num_shards)
            if per_sample is None:
                yield from _read_pinned(reads, shard_ids, offsets, prefetcher, stride)
            else:
                yield from _read_pinned_each(reads, shard_ids, offsets, prefetcher, stride, per_sample)
        else:
            switch = _Switch(access, prefetcher, stride)
            if per_sample is None:
                yield from _read_switching(switch, shard_ids, offsets)
            else:
                yield from _read_each(switch, shard_ids, offsets, per_sample)


def _lazy_reads(access: ShardAccess, num_shards: int) -> list[Read]:
    """One read function per shard: the first call opens the shard's reader and puts its own read
    method in its place, so later samples of that shard cost one list lookup."""
    reads: list[Read] = []

    def opener(shard_id: int) -> Read:
        def open_and_read(offset: int) -> Any:
            read = reads[shard_id] = access.reader(shard_id).read
            return read(offset)

        return open_and_read

    reads.extend(opener(shard_id) for shard_id in range(num_shards))
    return reads


def _read_pinned(
    reads: list[Read],
    shard_ids: np.ndarray,
    offsets: np.ndarray,
    prefetcher: Prefetcher,
    stride: int,
) -> Iterator[Any]:
    """Every shard of the dataset fits among the open readers, so none closes mid-pass and each
    shard's read method can be kept (a shuffled pass switches shard at nearly every sample)."""
    if not len(shard_ids):
        return
    # The first shard downloads alone (the first sample waits for it); only then does the prefetch
    # window open, so later shards never compete with it for bandwidth.
    yield reads[int(shard_ids[0])](int(offsets[0]))
    for start in range(0, len(shard_ids), stride):
        prefetcher.advance(start)
        begin = start or 1  # the first sample is already out
        stop = start + stride
        for shard_id, offset in zip(shard_ids[begin:stop].tolist(), offsets[begin:stop].tolist()):
            yield reads[shard_id](offset)


def _read_pinned_each(
    reads: list[Read],
    shard_ids: np.ndarray,
    offsets: np.ndarray,
    prefetcher: Prefetcher,
    stride: int,
    per_sample: PerSample,
) -> Iterator[Any]:
    """As ``_read_pinned``, each sample through ``per_sample``."""
    if not len(shard_ids):
        return
    sample_ids, fetch, slot = per_sample.sample_ids, per_sample.fetch, per_sample.slot
    slot[:] = int(sample_ids[0]), reads[int(shard_ids[0])], int(offsets[0])
    yield fetch(slot[0])
    for start in range(0, len(shard_ids), stride):
        prefetcher.advance(start)
        begin = start or 1
        stop = start + stride
        rows = zip(sample_ids[begin:stop].tolist(), shard_ids[begin:stop].tolist(), offsets[begin:stop].tolist())
        for sample_id, shard_id, offset in rows:
            slot[0] = sample_id
            slot[1] = reads[shard_id]
            slot[2] = offset
            yield fetch(sample_id)


class _Switch:
    """Opens the reader of the next shard when the shard changes, and moves the prefetch window in
    strides. As in ``_read_pinned``, the window opens only once the first shard is ready."""

    def __init__(self, access: ShardAccess, prefetcher: Prefetcher, stride: int) -> None:
        self._access = access
        self._prefetcher = prefetcher
        self._stride = stride
        self._next_advance = 0

    def to(self, position: int, shard_id: int) -> Read:
        if position >= self._next_advance and position:
            self._prefetcher.advance(position)
            self._next_advance = position + self._stride
        read = self._access.reader(shard_id).read
        if not position:
            self._prefetcher.advance(0)
            self._next_advance = self._stride
        return read


def _read_switching(switch: _Switch, shard_ids: np.ndarray, offsets: np.ndarray) -> Iterator[Any]:
    """More shards than open readers: ask the access layer for a reader whenever the shard changes."""
    current = -1
    read: Read = _unset
    for position, (shard_id, offset) in enumerate(_rows(shard_ids, offsets)):
        if shard_id != current:
            read = switch.to(position, shard_id)
            current = shard_id
        yield read(offset)


def _read_each(switch: _Switch, shard_ids: np.ndarray, offsets: np.ndarray, per_sample: PerSample) -> Iterator[Any]:
    """As ``_read_switching``, each sample through ``per_sample`` (which may read other samples too)."""
    current = -1
    read: Read = _unset
    fetch, slot = per_sample.fetch, per_sample.slot
    for position, (shard_id, offset, sample_id) in enumerate(_rows(shard_ids, offsets, per_sample.sample_ids)):
        if shard_id != current:
            read = switch.to(position, shard_id)
            current = shard_id
        slot[0] = sample_id
        slot[1] = read
        slot[2] = offset
        yield fetch(sample_id)


def _unset(offset: int) -> Any:
    raise AssertionError("no shard reader yet")
