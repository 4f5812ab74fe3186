"""The node's readers tell one another their times through the cache folder; Belady ranks from the earliest."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stream_plugin.cache.belady_clock import BeladyClock
from stream_plugin.cache.future import NEVER, NodeFuture
from stream_plugin.cache.reader_clocks import ReaderClocks, ReaderPlace
from stream_plugin.errors import ConfigError
from stream_plugin.format.index import ShardEntry


def test_each_reader_sees_the_earliest_live_reader_of_the_node(tmp_path: Path) -> None:
    first = ReaderClocks(tmp_path, ReaderPlace(readers=3, slot=0, lag=0))
    second = ReaderClocks(tmp_path, ReaderPlace(readers=3, slot=2, lag=0))
    assert first.earliest() is None  # a new file: no reader has told its time
    first.publish(40)
    second.publish(25)
    assert first.earliest() == second.earliest() == 25
    second.leave()
    assert first.earliest() == 40
    first.leave()
    assert second.earliest() is None


def test_a_reader_in_another_process_is_seen(tmp_path: Path) -> None:
    ReaderClocks(tmp_path, ReaderPlace(readers=2, slot=0, lag=0)).publish(90)
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_publish_in_child, args=(tmp_path, 17))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert ReaderClocks(tmp_path, ReaderPlace(readers=2, slot=0, lag=0)).earliest() == 17


def _publish_in_child(folder: Path, time: int) -> None:
    ReaderClocks(folder, ReaderPlace(readers=2, slot=1, lag=0)).publish(time)
    os._exit(0)  # the slot stays written: a reader that stops without leaving, as one that dies


def test_a_slot_not_written_for_long_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clocks = ReaderClocks(tmp_path, ReaderPlace(readers=2, slot=0, lag=0))
    clocks.publish(5)
    ReaderClocks(tmp_path, ReaderPlace(readers=2, slot=1, lag=0)).publish(50)
    clocks._slots[0, 1] -= int(700e9)  # slot 0 last written 700 s ago: a process gone
    assert clocks.earliest() == 50


def test_a_slot_outside_the_node_readers_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"expected a slot in \[0, 4\), found 4"):
        ReaderPlace(readers=4, slot=4, lag=0)


def test_a_worker_ahead_ranks_a_shard_an_earlier_worker_still_reads_as_in_use(
    make_dataset: Callable[..., Any], tmp_path: Path
) -> None:
    """Two workers of one node: shard 0 is read from 0 to 30, shard 1 from 100 on. The worker behind is
    at 10; the one ahead, at 60, still sees shard 0 in use (the worker behind reads it), not done with."""
    future = NodeFuture(first=np.array([[0, 100]]), last=np.array([[30, 140]]))
    entries = make_dataset(shards=2, shard_bytes=100).entries
    behind, ahead = BeladyClock(), BeladyClock()
    for clock, slot in ((behind, 0), (ahead, 1)):
        clock.expect(future, _columns(entries), readers=ReaderClocks(tmp_path, ReaderPlace(readers=2, slot=slot, lag=0)))
    behind.advance(10)
    ahead.advance(60)
    assert (ahead.next_uses(entries) == [10, 100]).all()
    behind.leave()  # the worker behind finished its piece: shard 0 is done with until a later pass
    assert (ahead.next_uses(entries) == [NEVER, 100]).all()


def test_without_shared_clocks_a_process_ranks_from_its_own_clock(make_dataset: Callable[..., Any]) -> None:
    entries = make_dataset(shards=2, shard_bytes=100).entries
    clock = BeladyClock()
    clock.expect(NodeFuture(first=np.array([[0, 100]]), last=np.array([[30, 140]])), _columns(entries))
    clock.advance(60)
    assert (clock.next_uses(entries) == [NEVER, 100]).all()


def _columns(entries: list[ShardEntry]) -> dict[str, int]:
    return {entry.raw_data.basename: column for column, entry in enumerate(entries)}
