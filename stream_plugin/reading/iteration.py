"""The per-sample hot loop: turn a worker's global sample ids into decoded samples, in order.

Shard lookups are vectorised up front; the loop itself only switches readers when the shard changes.
Subclasses that override ``__getitem__`` or ``get_item`` are honoured (MosaicML's transform hook).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from stream_plugin.cache.prefetch import Prefetcher
    from stream_plugin.reading.dataset import StreamingDataset
    from stream_plugin.reading.shard_access import ShardAccess


def _overrides(dataset: StreamingDataset, name: str) -> bool:
    from stream_plugin.reading.dataset import StreamingDataset

    return getattr(type(dataset), name) is not getattr(StreamingDataset, name)


_CHUNK = 1 << 16


def _positions(shard_ids: np.ndarray, offsets: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """``(position, shard, offset)`` per sample, converted to Python ints a chunk at a time.

    Converting the whole rest of an epoch up front would make the first sample after a resume wait
    (and the process hold the lists) in proportion to how much of the epoch is left.
    """
    for start in range(0, len(shard_ids), _CHUNK):
        stop = start + _CHUNK
        yield from zip(
            range(start, start + len(shard_ids[start:stop])),
            shard_ids[start:stop].tolist(),
            offsets[start:stop].tolist(),
        )


def read_samples(dataset: StreamingDataset, sample_ids: np.ndarray) -> Iterator[Any]:
    """Yield the samples ``sample_ids`` (global ids) in order, prefetching the shards they need."""
    access = dataset._shard_access()
    shard_ids, offsets = dataset._table.locate(sample_ids)
    # Moving the prefetch window costs Python work per sample it covers, so move it in strides.
    stride = max(1, (dataset.predownload or 512) // 8)
    with access.prefetch(shard_ids, predownload=dataset.predownload) as prefetcher:
        if _overrides(dataset, "__getitem__") or _overrides(dataset, "get_item"):
            for position, sample_id in enumerate(sample_ids.tolist()):
                if position % stride == 0:
                    prefetcher.advance(position)
                yield dataset[sample_id]
            return
        if dataset._table.num_shards <= access.max_open:
            reads = _lazy_reads(access, dataset._table.num_shards)
            yield from _read_pinned(reads, shard_ids, offsets, prefetcher, stride)
        else:
            yield from _read_switching(access, shard_ids, offsets, prefetcher, stride)


def _lazy_reads(access: ShardAccess, num_shards: int) -> list[Callable[[int], Any]]:
    """One read function per shard: the first call opens the shard's reader and puts its own read
    method in its place, so later samples of that shard cost one list lookup."""
    reads: list[Callable[[int], Any]] = []

    def opener(shard_id: int) -> Callable[[int], Any]:
        def open_and_read(offset: int) -> Any:
            read = reads[shard_id] = access.reader(shard_id).read
            return read(offset)

        return open_and_read

    reads.extend(opener(shard_id) for shard_id in range(num_shards))
    return reads


def _read_pinned(
    reads: list[Callable[[int], Any]],
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


def _read_switching(
    access: ShardAccess, shard_ids: np.ndarray, offsets: np.ndarray, prefetcher: Prefetcher, stride: int
) -> Iterator[Any]:
    """More shards than open readers: ask the access layer for a reader whenever the shard changes."""
    current = -1
    read: Any = None
    next_advance = 0
    for position, shard_id, offset in _positions(shard_ids, offsets):
        if shard_id != current:
            # As in _read_pinned, the window opens only once the first shard is ready.
            if position >= next_advance and position:
                prefetcher.advance(position)
                next_advance = position + stride
            read = access.reader(shard_id).read
            if not position:
                prefetcher.advance(0)
                next_advance = stride
            current = shard_id
        yield read(offset)
