"""The request rate a node allows itself against one store: additive increase, multiplicative decrease.

A store that throttles (HTTP 429, S3 ``SlowDown``) refuses requests over its limit; retrying each at once
only makes more refusals. So every process of a node shares one ``RateState`` per store, with no
coordinator: a small JSON file in the cache's control folder (``FileRateBook``, changed under an
``flock``, as ``cache/locks.py`` coordinates), or memory for a process without a cache
(``MemoryRateBook``).

The rule (pure functions of the state and a time, so that the simulator can follow it exactly):

* Until the store first refuses, requests go out unpaced (``rate`` is None); the starts of the last
  ones are kept, to measure the rate the node was sending at.
* A refusal multiplies the rate by ``DECREASE`` (of the rate measured then, the first time), once per
  congestion event: refusals of requests given their slot before the last decrease are the same event
  (``sent_at`` is when the slot was given, not when it came). A wait the
  store named (``Retry-After``, ``RateLimit``) holds every request of the node until then.
* Each answered request adds ``INCREASE_PER_SECOND x ceiling / rate``: the rate grows by
  ``INCREASE_PER_SECOND`` of the rate at the last refusal each second (linear in time, as TCP's
  congestion window), until the store refuses again.
* Requests take slots ``1 / rate`` apart (``reserve``): the node's processes queue in one line.

State idle for ``FORGET_AFTER`` seconds is forgotten: a later job starts unpaced.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Final, Protocol

DECREASE: Final = 0.85  # the rate after a refusal, as a fraction of the rate before it
INCREASE_PER_SECOND: Final = 0.03  # growth each second, as a fraction of the rate at the last refusal
MIN_RATE: Final = 0.05  # requests per second: one every 20 s at the slowest
MEASURE_WINDOW: Final = 2.0  # seconds of starts that measure the unpaced rate at a first refusal
MIN_MEASURE_SPAN: Final = 0.25  # seconds: a burst of starts is measured over at least this long
KEPT_STARTS: Final = 64
FORGET_AFTER: Final = 600.0


@dataclass(frozen=True)
class RateState:
    """One node's view of one store; times are wall-clock seconds (``time.time``), shared by processes.

    ``granted``, ``refused`` and ``waited`` count since ``reported_at`` (the last WARNING line).
    """

    rate: float | None = None  # requests per second the node allows itself; None: not throttled yet
    ceiling: float = 0.0  # the rate the last decrease cut from (scales the increase)
    next_slot: float = 0.0  # when the next paced request may start
    blocked_until: float = 0.0  # no request before this: the wait the store named
    decreased_at: float = 0.0  # when the rate was last cut
    updated: float = 0.0
    starts: tuple[float, ...] = ()  # the last KEPT_STARTS request starts (measure the unpaced rate)
    granted: int = 0
    refused: int = 0
    waited: float = 0.0  # seconds requests waited for a slot or a named wait, summed
    reported_at: float = 0.0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> RateState:
        """The state in ``data``; a fresh one for anything unreadable (a torn write cannot happen, but a
        file from another version can)."""
        try:
            raw = json.loads(data)
            raw["starts"] = tuple(float(start) for start in raw.get("starts", ()))
            return cls(**raw)
        except (ValueError, TypeError, AttributeError):
            return cls()


def current(state: RateState, now: float) -> RateState:
    """``state``, or a fresh one when it has been idle for ``FORGET_AFTER`` seconds (or is from a
    clock that has since gone back)."""
    if state.updated and not state.updated - 60.0 <= now <= state.updated + FORGET_AFTER:
        return RateState(reported_at=state.reported_at)
    return state


def measured_rate(state: RateState, now: float) -> float:
    """Requests per second the node sent over the last ``MEASURE_WINDOW`` (at least one: the refused one)."""
    recent = [start for start in state.starts if now - start <= MEASURE_WINDOW]
    if not recent:
        return 1.0 / MEASURE_WINDOW
    return len(recent) / max(now - min(recent), MIN_MEASURE_SPAN)


def reserve(state: RateState, now: float) -> tuple[RateState, float]:
    """Take the next slot: the new state and when the request may start (``now`` or later)."""
    state = current(state, now)
    start = max(now, state.blocked_until)
    next_slot = state.next_slot
    if state.rate is not None:
        start = max(start, next_slot)
        next_slot = start + 1.0 / state.rate
    starts = (*state.starts[-(KEPT_STARTS - 1) :], start)
    return (
        replace(
            state,
            next_slot=next_slot,
            starts=starts,
            updated=now,
            granted=state.granted + 1,
            waited=state.waited + (start - now),
        ),
        start,
    )


def refused(state: RateState, now: float, sent_at: float, wait: float | None) -> RateState:
    """The store refused a request sent at ``sent_at``; ``wait``: the seconds it named, if any."""
    state = current(state, now)
    blocked_until = state.blocked_until if wait is None else max(state.blocked_until, now + wait)
    state = replace(state, blocked_until=blocked_until, refused=state.refused + 1, updated=now)
    if state.rate is not None and sent_at < state.decreased_at:
        return state  # sent before the last cut: the same congestion event, already answered
    ceiling = state.rate if state.rate is not None else measured_rate(state, now)
    rate = max(MIN_RATE, ceiling * DECREASE)
    return replace(
        state,
        rate=rate,
        ceiling=ceiling,
        decreased_at=now,
        next_slot=max(state.next_slot, now + 1.0 / rate),
    )


def answered(state: RateState, now: float, sent_at: float) -> RateState:
    """The store answered a request sent at ``sent_at``: the rate grows (additively)."""
    state = current(state, now)
    if state.rate is None or sent_at < state.decreased_at:
        return state
    rate = state.rate + INCREASE_PER_SECOND * state.ceiling / state.rate
    return replace(state, rate=rate, updated=now)


def reported(state: RateState, now: float) -> RateState:
    """The counters after a report line: zero, from ``now``."""
    return replace(state, granted=0, refused=0, waited=0.0, reported_at=now)


class RateBook(Protocol):
    """Where a node's ``RateState`` lives: ``update`` applies a change atomically and returns the result."""

    def update(self, change: Callable[[RateState], RateState]) -> RateState: ...


@dataclass
class MemoryRateBook:
    """A ``RateState`` shared by the threads of one process."""

    state: RateState = field(default_factory=RateState)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def update(self, change: Callable[[RateState], RateState]) -> RateState:
        with self._lock:
            self.state = change(self.state)
            return self.state


@dataclass(frozen=True)
class FileRateBook:
    """A ``RateState`` shared by every process of a node: the file ``<folder>/<key>.rate``, read and
    rewritten in place under an exclusive ``flock`` on it (never deleted, as the cache's lock files).

    Every reader holds the lock too, so none sees a write half done. A process killed mid-write can
    leave a torn file: it reads as a fresh state (the rate is advice, relearned in seconds), which is
    why no temporary file and rename are paid on every request.
    """

    folder: Path
    key: str

    @property
    def path(self) -> Path:
        return self.folder / f"{self.key}.rate"

    @contextmanager
    def _locked(self) -> Iterator[int]:
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        try:
            descriptor = os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            self.folder.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.path, flags, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield descriptor
        finally:
            os.close(descriptor)  # releases the lock

    @staticmethod
    def _read(descriptor: int) -> RateState:
        data = os.pread(descriptor, 1 << 16, 0)
        return RateState.from_json(data) if data else RateState()

    def read(self) -> RateState:
        with self._locked() as descriptor:
            return self._read(descriptor)

    def update(self, change: Callable[[RateState], RateState]) -> RateState:
        with self._locked() as descriptor:
            before = self._read(descriptor)
            after = change(before)
            if after != before:
                data = after.to_json()
                os.pwrite(descriptor, data, 0)
                os.ftruncate(descriptor, len(data))
            return after


__all__ = [
    "DECREASE",
    "INCREASE_PER_SECOND",
    "FileRateBook",
    "MemoryRateBook",
    "RateBook",
    "RateState",
    "answered",
    "current",
    "measured_rate",
    "refused",
    "reported",
    "reserve",
]
