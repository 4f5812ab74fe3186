"""The per-sample hot loop: turn a worker's shard ids and offsets into decoded samples, in order.

Shard lookups are vectorised by the caller; the samples come in blocks of a stride, each a C-level
``map`` over the stride's shards and offsets, chained into one iterator, and the prefetch window moves
once per block. It receives exactly what it needs (shard access,
shard ids and offsets, the predownload count, and a per-sample function), never the dataset.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import chain
from operator import call
from typing import Any

import numpy as np

from stream_plugin.reading.node_forecast import PieceClock
from stream_plugin.reading.shard_access import ShardAccess

Read = Callable[[int], Any]  # an open shard reader's read(offset)
# When a subclass overrides how a sample is fetched, each sample comes from ``fetch(sample_id)``
# instead of ``read(offset)``; just before, the loop puts ``[sample_id, read, offset]`` in ``slot``, where
# the dataset's own ``get_item`` finds it (so a subclass's ``super().get_item(i)`` needs no lookup).
Fetch = Callable[[int], Any]
# A subclass that reads many samples faster at once gives ``fetch_many(sample_ids)``: the samples of a
# stride in one call (``sample_ids`` a 1-D int64 array), which replaces ``fetch`` and the slot.
FetchMany = Callable[[np.ndarray], Iterable[Any]]


@dataclass(frozen=True)
class PerSample:
    """Fetch each sample through ``fetch``: the global ``sample_ids`` of the pass, and the ``slot``; or
    a stride at a time through ``fetch_many`` where given."""

    sample_ids: np.ndarray
    fetch: Fetch
    slot: list[Any]
    fetch_many: FetchMany | None = None


class SamplePass(chain[Any]):
    """The samples of a pass, in order: its blocks chained by ``itertools.chain`` (no Python frame per
    sample), with a generator's ``close`` (it closes the generator of blocks, and with it the pass's
    prefetch). Made by ``chain_blocks``."""

    __slots__ = ("_blocks",)

    _blocks: Generator[Iterable[Any], None, None]

    def close(self) -> None:
        self._blocks.close()


def chain_blocks(blocks: Generator[Iterable[Any], None, None]) -> Iterator[Any]:
    """The samples of ``blocks`` one after another, as one iterator that can be closed."""
    samples = SamplePass.from_iterable(blocks)
    assert isinstance(samples, SamplePass)
    samples._blocks = blocks
    return samples


def sample_blocks(
    access: ShardAccess,
    shard_ids: np.ndarray,
    offsets: np.ndarray,
    *,
    predownload: int | None,
    per_sample: PerSample | None = None,
    more: Callable[[], np.ndarray | None] | None = None,
    clock: PieceClock | None = None,
) -> Iterator[Iterable[Any]]:
    """The samples at ``(shard_ids[i], offsets[i])`` in order, in blocks of a stride each (chain them:
    ``chain_blocks``), prefetching the shards they need. Read each block before asking for the next:
    asking moves the prefetch window to the block's first sample.

    A block is a ``map`` over the stride's shard ids and offsets, so the samples of a shuffled pass
    (a new shard at nearly every sample) cost no Python code each but the reader's own ``read``.

    With ``per_sample``, sample ``i`` is ``per_sample.fetch(sample_ids[i])`` (a subclass that overrides
    ``get_item``), its reader and offset put in ``per_sample.slot`` first; or, with its ``fetch_many``,
    each block is ``fetch_many`` of the block's sample ids. ``more()`` gives the shard ids
    of the samples read after these (the next piece of the pass), to prefetch them in time; ``clock``
    maps a position among these samples to the node's time (eviction by the node's future).
    """
    # Moving the prefetch window costs work per sample it covers, so move it in strides.
    stride = max(1, (predownload or 512) // 8)
    if clock is not None:  # the node's clock moves with the window: keep it within a batch of the reads
        stride = min(stride, clock.step)
    with access.prefetch(shard_ids, predownload=predownload, more=more, clock=clock) as prefetcher:
        if not len(shard_ids):
            return
        pinned = access.num_shards <= access.max_open
        reads = _lazy_reads(access, access.num_shards) if pinned else []
        for start in range(0, len(shard_ids), stride):
            if start:
                prefetcher.advance(start)
                begin = start
            else:
                # The first shard downloads alone (the first sample waits for it); only then does the
                # prefetch window open, so later shards never compete with it for bandwidth.
                yield _block(access, reads, shard_ids[:1], offsets[:1], per_sample, 0)
                prefetcher.advance(0)
                begin = 1
            stop = start + stride
            if begin < len(shard_ids):
                # The node's clock learns the stride is read as its last sample is: a worker that waits
                # for the trainer after its batch holds back no eviction of the shards it is done with.
                done = None
                if clock is not None:
                    done = partial(access.advance_clock, clock(min(stop, len(shard_ids))))
                    access.note_stride(shard_ids[begin:stop], begin, clock)
                yield _block(access, reads, shard_ids[begin:stop], offsets[begin:stop], per_sample, begin, done)


def _block(
    access: ShardAccess,
    reads: list[Read],
    shard_ids: np.ndarray,
    offsets: np.ndarray,
    per_sample: PerSample | None,
    first: int,
    done: Callable[[], None] | None = None,
) -> Iterable[Any]:
    """The samples of one stride (positions ``first ..`` of the pass). ``reads`` holds a read per shard
    of the dataset when every shard fits among the open readers (``_lazy_reads``), else is empty."""
    if per_sample is not None and per_sample.fetch_many is not None:  # the subclass finds its own readers
        return per_sample.fetch_many(per_sample.sample_ids[first : first + len(shard_ids)])
    shard_list = shard_ids.tolist()
    if reads:
        lookup: Callable[[int], Read] = reads.__getitem__
    elif per_sample is None and len(set(shard_list)) <= access.protected_readers:
        # Each shard's reader is asked for once in the stride: the stride's readers are the most
        # recently used, and protected, so none of them closes while the stride is read. (Not with
        # ``per_sample``: a subclass's fetch may read other shards, whose readers could close these.)
        lookup = _StrideReads(access).__getitem__
    else:
        lookup = _reader_read(access)
    offset_list = offsets.tolist()
    looked_up: Iterable[Read] = map(lookup, shard_list)
    if done is not None and shard_list:
        looked_up = chain(map(lookup, shard_list[:-1]), _after(done, lookup, shard_list[-1]))
    if per_sample is None:
        return map(call, looked_up, offset_list)
    sample_ids = per_sample.sample_ids[first : first + len(shard_list)].tolist()
    return _fetch_each(per_sample, sample_ids, looked_up, offset_list)


def _after(done: Callable[[], None], lookup: Callable[[int], Read], shard: int) -> Iterator[Read]:
    """The read of a stride's last sample, once ``done()`` is told the stride is read."""
    done()
    yield lookup(shard)


def _fetch_each(
    per_sample: PerSample, sample_ids: list[int], reads: Iterable[Read], offsets: list[int]
) -> Iterator[Any]:
    """Each sample through ``per_sample.fetch`` (which may read other samples too), its reader and
    offset in the slot first."""
    fetch, slot = per_sample.fetch, per_sample.slot
    for sample_id, read, offset in zip(sample_ids, reads, offsets):
        slot[0] = sample_id
        slot[1] = read
        slot[2] = offset
        yield fetch(sample_id)


class _StrideReads(dict[int, Read]):
    """Shard id -> its reader's read, opened on first use: a dict lookup per sample after that."""

    def __init__(self, access: ShardAccess) -> None:
        super().__init__()
        self._access = access

    def __missing__(self, shard_id: int) -> Read:
        read = self[shard_id] = self._access.reader(shard_id).read
        return read


def _reader_read(access: ShardAccess) -> Callable[[int], Read]:
    """More shards in one stride than open readers: ask the access layer at every sample."""

    def lookup(shard_id: int) -> Read:
        return access.reader(shard_id).read

    return lookup


def _lazy_reads(access: ShardAccess, num_shards: int) -> list[Read]:
    """One read function per shard: the first call opens the shard's reader and puts its own read
    method in its place, so later samples of that shard cost one list lookup. Only where every shard
    of the dataset fits among the open readers, so none closes mid-pass."""
    reads: list[Read] = []

    def opener(shard_id: int) -> Read:
        def open_and_read(offset: int) -> Any:
            read = reads[shard_id] = access.reader(shard_id).read
            return read(offset)

        return open_and_read

    reads.extend(opener(shard_id) for shard_id in range(num_shards))
    return reads
