"""Reading one pass: its sample ids a piece at a time, located and read lazily, as one closable iterator.

Each piece is planned and located only when the samples before it are read, so the first sample does
not wait for the pass. The prefetcher asks for the next piece as its window reaches the end of the
current one (``locate_next``), so the next piece's shards download while this one is read. The samples
come through ``chain_blocks``: no Python frame per sample between the reader and the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream_plugin.reading.iteration import Fetch, FetchMany, PerSample, chain_blocks, sample_blocks
from stream_plugin.reading.node_forecast import NodeClock, PieceClock
from stream_plugin.reading.shard_access import ShardAccess
from stream_plugin.reading.shard_table import ShardTable


@dataclass(frozen=True)
class PassReading:
    """What reading a pass takes from the dataset, and nothing more."""

    access: ShardAccess  # this process's shard readers
    table: ShardTable  # where each sample id lives
    predownload: int | None
    fetch: Fetch | None  # a subclass's own ``get_item`` (or ``__getitem__``), called per sample; None: read
    transform: Callable[[Any], Any] | None  # applied to what is read (a ``fetch`` applies its own)
    slot: list[Any]  # ``[sample id, read, offset]`` of the sample being fetched (see ``iteration``)
    fetch_many: FetchMany | None = None  # with ``fetch``: a subclass's read of a stride of samples at once


def read_pass(
    reading: PassReading,
    sample_id_pieces: Iterable[np.ndarray],
    *,
    clock: NodeClock | None,
    when_done: Callable[[], None] | None,
) -> Iterator[Any]:
    """The pass's samples, in order. ``when_done`` runs once the last one is read: a pass abandoned
    before (a break, a closed iterator) never calls it, so its position stays where it was."""
    return chain_blocks(_pass_blocks(reading, sample_id_pieces, clock=clock, when_done=when_done))


def _pass_blocks(
    reading: PassReading,
    sample_id_pieces: Iterable[np.ndarray],
    *,
    clock: NodeClock | None,
    when_done: Callable[[], None] | None,
) -> Generator[Iterable[Any], None, None]:
    pieces = iter(sample_id_pieces)
    located: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    read = 0  # samples of the pass in the pieces before the current one

    def locate_next() -> np.ndarray | None:
        sample_ids = next(pieces, None)
        if sample_ids is None:
            return None
        shard_ids, offsets = reading.table.locate(sample_ids)
        located.append((sample_ids, shard_ids, offsets))
        return shard_ids

    try:
        while located or locate_next() is not None:
            piece = located.pop(0)
            piece_clock = None if clock is None else PieceClock(clock, read)
            yield from _piece_blocks(reading, *piece, more=locate_next, clock=piece_clock)
            read += len(piece[0])
    finally:
        reading.slot[:] = None, None, 0
    if when_done is not None:
        when_done()


def _piece_blocks(
    reading: PassReading,
    sample_ids: np.ndarray,
    shard_ids: np.ndarray,
    offsets: np.ndarray,
    *,
    more: Callable[[], np.ndarray | None],
    clock: PieceClock | None,
) -> Iterator[Iterable[Any]]:
    per_sample = (
        None
        if reading.fetch is None
        else PerSample(sample_ids, reading.fetch, reading.slot, reading.fetch_many)
    )
    blocks = sample_blocks(
        reading.access,
        shard_ids,
        offsets,
        predownload=reading.predownload,
        per_sample=per_sample,
        more=more,
        clock=clock,
    )
    transform = reading.transform
    if transform is not None and per_sample is None:
        blocks = (map(transform, block) for block in blocks)
    return blocks


__all__ = ["PassReading", "read_pass"]
