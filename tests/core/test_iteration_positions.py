"""``reading.iteration``: a pass's samples, in strides chained into one iterator, in order and whole."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from stream_plugin.reading.iteration import PerSample, chain_blocks, sample_blocks


class _Reader:
    def __init__(self, shard_id: int, access: _Access) -> None:
        self.shard_id = shard_id
        self.access = access

    def read(self, offset: int) -> tuple[int, int]:
        assert self.shard_id in self.access.open_now, "read through a reader that was closed"
        return self.shard_id, offset


class _Prefetcher:
    def __init__(self) -> None:
        self.positions: list[int] = []

    def advance(self, position: int) -> None:
        self.positions.append(position)


class _Access:
    """What ``sample_blocks`` uses of ``ShardAccess``: readers kept in a least-recently-used pool."""

    def __init__(self, num_shards: int, max_open: int) -> None:
        self.num_shards = num_shards
        self.max_open = max_open
        self.protected_readers = max_open  # readers close least recently used first: all are protected
        self.open_now: list[int] = []
        self.prefetcher = _Prefetcher()
        self.prefetch_closed = False

    def reader(self, shard_id: int) -> _Reader:
        if shard_id in self.open_now:
            self.open_now.remove(shard_id)
        self.open_now.append(shard_id)
        del self.open_now[: -self.max_open]
        return _Reader(shard_id, self)

    @contextmanager
    def prefetch(self, shard_ids: np.ndarray, **_: Any) -> Iterator[_Prefetcher]:
        try:
            yield self.prefetcher
        finally:
            self.prefetch_closed = True


def _pass(access: _Access, count: int, predownload: int, **kwargs: Any) -> tuple[Iterator[Any], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(count)
    shard_ids = rng.integers(0, access.num_shards, count)
    offsets = rng.integers(0, 1000, count)
    blocks = sample_blocks(access, shard_ids, offsets, predownload=predownload, **kwargs)  # type: ignore[arg-type]
    return chain_blocks(blocks), shard_ids, offsets  # type: ignore[arg-type]


@pytest.mark.parametrize("num_shards, max_open", [(8, 16), (40, 16), (40, 4)])
@pytest.mark.parametrize("count", [0, 1, 63, 64, 65, 1000])
def test_positions_cross_stride_boundaries_without_gaps_or_repeats(num_shards: int, max_open: int, count: int) -> None:
    # Every shard pinned (8 of 16), a stride's shards within the open readers (40 of 16, strides of
    # 8), and more shards in a stride than open readers (40 of 4): the samples come in order, whole.
    access = _Access(num_shards, max_open)
    samples, shard_ids, offsets = _pass(access, count, predownload=64)
    assert list(samples) == list(zip(shard_ids.tolist(), offsets.tolist()))
    assert access.prefetcher.positions == list(range(0, count, 8))  # the window moves once a stride
    assert access.prefetch_closed


def test_a_get_item_override_sees_each_sample_with_its_reader_and_offset_in_the_slot() -> None:
    access = _Access(40, 16)
    count = 100
    sample_ids = np.arange(count, dtype=np.int64) + 5000
    slot: list[Any] = [None, None, 0]

    def fetch(sample_id: int) -> tuple[int, int, int]:
        assert slot[0] == sample_id
        read: Callable[[int], tuple[int, int]] = slot[1]
        return (sample_id, *read(slot[2]))

    samples, shard_ids, offsets = _pass(access, count, predownload=64, per_sample=PerSample(sample_ids, fetch, slot))
    assert list(samples) == list(zip(sample_ids.tolist(), shard_ids.tolist(), offsets.tolist()))


def test_closing_a_pass_closes_its_prefetch() -> None:
    access = _Access(8, 16)
    samples, _, _ = _pass(access, 1000, predownload=64)
    next(samples)
    assert not access.prefetch_closed
    samples.close()  # type: ignore[attr-defined]
    assert access.prefetch_closed
    assert list(samples) == []


def test_after_a_read_raises_the_pass_goes_on_with_the_next_sample() -> None:
    access = _Access(8, 16)
    samples, shard_ids, offsets = _pass(access, 100, predownload=64)
    failing = (int(shard_ids[5]), int(offsets[5]))
    original = _Reader.read

    def read(self: _Reader, offset: int) -> tuple[int, int]:
        if (self.shard_id, offset) == failing:
            raise OSError("rig: a read fails")
        return original(self, offset)

    expected = list(zip(shard_ids.tolist(), offsets.tolist()))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_Reader, "read", read)
        got = [next(samples) for _ in range(5)]
        with pytest.raises(OSError, match="a read fails"):
            next(samples)
        got += [sample for sample in samples if sample != failing]
    assert got == [row for row in expected if row != failing]
