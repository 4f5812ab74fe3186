"""The node's shared request rate against a throttling store: additive increase, multiplicative decrease."""

from __future__ import annotations

import multiprocessing
from dataclasses import replace
from pathlib import Path

import pytest

from stream_plugin.storage.node_rate import (
    DECREASE,
    FORGET_AFTER,
    INCREASE_PER_SECOND,
    FileRateBook,
    MemoryRateBook,
    RateState,
    answered,
    refused,
    reserve,
)

T0 = 1_000.0


def _sent(state: RateState, now: float, count: int) -> tuple[RateState, list[float]]:
    starts = []
    for _ in range(count):
        state, start = reserve(state, now)
        starts.append(start)
    return state, starts


def test_requests_go_unpaced_until_the_store_first_refuses() -> None:
    state, starts = _sent(RateState(), T0, 5)
    assert starts == [T0] * 5 and state.rate is None


def test_the_first_refusal_cuts_the_measured_rate() -> None:
    state, _ = _sent(RateState(), T0, 8)  # 8 requests in the last instant: measured over 0.25 s, 32/s
    state = refused(state, T0 + 0.1, sent_at=T0, wait=None)
    assert state.rate == pytest.approx(8 / 0.25 * DECREASE)
    assert state.ceiling == pytest.approx(8 / 0.25)


def test_requests_then_take_slots_one_over_the_rate_apart() -> None:
    state = refused(RateState(), T0, sent_at=T0, wait=None)  # measured 1 request: 4/s, cut to 3.2/s
    state, starts = _sent(state, T0, 3)
    gaps = [later - earlier for earlier, later in zip(starts, starts[1:])]
    assert gaps == pytest.approx([1 / state.rate] * 2)  # type: ignore[operator]
    assert starts[0] >= T0 + 1 / state.rate  # type: ignore[operator]  # the refused one's retry waits a slot


def test_refusals_of_requests_sent_before_a_cut_are_one_congestion_event() -> None:
    state, _ = _sent(RateState(), T0, 4)
    state = refused(state, T0 + 0.01, sent_at=T0, wait=None)
    once = state.rate
    state = refused(state, T0 + 0.02, sent_at=T0, wait=None)  # in flight when the rate was cut
    assert state.rate == once and state.refused == 2
    state = refused(state, T0 + 0.03, sent_at=T0 + 0.025, wait=None)  # sent after the cut: cut again
    assert state.rate == pytest.approx(once * DECREASE)  # type: ignore[operator]


def test_answers_raise_the_rate_by_a_fixed_share_of_the_ceiling_each_second() -> None:
    state = replace(refused(RateState(), T0, sent_at=T0, wait=None), rate=10.0, ceiling=12.0)
    rate, ceiling = 10.0, 12.0
    now = T0 + 1
    for _ in range(10):  # one second of answers at that rate
        state = answered(state, now, sent_at=now)
    assert state.rate == pytest.approx(rate + INCREASE_PER_SECOND * ceiling, rel=0.05)
    assert answered(state, now, sent_at=T0 - 1).rate == state.rate  # sent before the cut: no increase


def test_a_wait_the_store_names_holds_every_request_of_the_node_until_then() -> None:
    state = refused(RateState(), T0, sent_at=T0, wait=5.0)
    state, start = reserve(state, T0 + 1)
    assert start == T0 + 5.0


def test_state_idle_for_long_is_forgotten() -> None:
    state = refused(RateState(), T0, sent_at=T0, wait=None)
    later = T0 + FORGET_AFTER + 1
    state, start = reserve(state, later)
    assert start == later and state.rate is None


def test_an_unreadable_state_file_reads_as_a_fresh_state(tmp_path: Path) -> None:
    book = FileRateBook(tmp_path, "store")
    tmp_path.joinpath("store.rate").write_bytes(b"{not json")  # a write torn by a killed process
    assert book.read() == RateState()
    saved = book.update(lambda state: refused(state, T0, sent_at=T0, wait=1.0))
    assert book.read() == saved and RateState.from_json(saved.to_json()) == saved


def _reserve_slots(folder: str, count: int, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    book = FileRateBook(Path(folder), "store")
    starts = []

    def take(state: RateState) -> RateState:
        after, start = reserve(state, T0)
        starts.append(start)
        return after

    for _ in range(count):
        book.update(take)
    queue.put(starts)


def test_the_processes_of_a_node_share_one_line_of_slots(tmp_path: Path) -> None:
    book = FileRateBook(tmp_path, "store")
    book.update(lambda state: replace(state, rate=10.0, ceiling=10.0, next_slot=T0, updated=T0))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=_reserve_slots, args=(str(tmp_path), 5, queue)) for _ in range(3)]
    for process in processes:
        process.start()
    starts = sorted(start for _ in processes for start in queue.get(timeout=60))
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert starts == pytest.approx([T0 + number / 10.0 for number in range(15)])  # 15 distinct slots, 0.1 s apart


def test_a_memory_book_applies_each_change_to_the_last_state() -> None:
    book = MemoryRateBook()
    book.update(lambda state: refused(state, T0, sent_at=T0, wait=None))
    assert book.update(lambda state: state).refused == 1
