"""``NodeThrottle``: the door every request to a store passes, pacing it by the node's shared rate.

``call_with_retries`` asks it for a slot before each request (``admit``), and tells it how the store
answered (``refused`` / ``answered``). The rule is ``node_rate``'s; this class adds the clock, the sleep
and the report: one WARNING line a minute per node while the store throttles (rate, waits, refusals),
never one per request.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Final, TypeVar
from urllib.parse import urlsplit

from stream_plugin.redaction import get_logger
from stream_plugin.storage import node_rate
from stream_plugin.storage.node_rate import FileRateBook, MemoryRateBook, RateBook, RateState

T = TypeVar("T")
REPORT_EVERY: Final = 60.0  # seconds between two report lines of a node
logger = get_logger(__name__)


def store_key(url: str) -> str:
    """The name of a store's rate file: a digest of its scheme and host (or bucket), never a secret.

    Stores limit per host, account or bucket, so every stream of one host shares one rate."""
    parts = urlsplit(url)
    where = f"{parts.scheme}://{parts.hostname or ''}:{parts.port or ''}" if "://" in url else "local"
    return hashlib.sha256(where.encode("utf-8")).hexdigest()[:24]


def _reserve(state: RateState, *, now: float) -> tuple[RateState, float]:
    return node_rate.reserve(state, now)


class NodeThrottle:
    """Paces one store's requests by the rate every process of the node shares (see ``node_rate``)."""

    def __init__(
        self,
        book: RateBook,
        store: str,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._book = book
        self._store = store
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def for_node(cls, folder: Path | None, store_url: str) -> NodeThrottle:
        """The throttle of ``store_url`` shared through ``folder`` (the cache's control folder); with no
        folder, shared by this process's threads only."""
        book: RateBook = MemoryRateBook() if folder is None else FileRateBook(folder, store_key(store_url))
        return cls(book, store_url)

    def state(self) -> RateState:
        """The node's state now (for messages and tests)."""
        return self._book.update(lambda state: state)

    def admit(self, give_up_at: float | None = None) -> float | None:
        """Wait for this request's slot; return when the slot was given (the request's place in the
        node's line: ``refused`` / ``answered`` take it back). None, without waiting, when the slot comes
        after ``give_up_at`` (the caller's throttle deadline). A wait the store named while this request
        slept for its slot sends it back to the line."""
        while True:
            given = self._clock()
            start = self._apply(partial(_reserve, now=given), given)
            if give_up_at is not None and start > give_up_at:
                return None
            if start <= given:
                return given
            while start > (now := self._clock()):
                self._sleep(start - now)
            if self.state().blocked_until <= now:
                return given

    def refused(self, sent_at: float, wait: float | None) -> None:
        """The store refused the request ``admit`` placed at ``sent_at``, naming ``wait`` seconds or not."""
        now = self._clock()
        self._apply(lambda state: (node_rate.refused(state, now, sent_at, wait), None), now)

    def answered(self, sent_at: float) -> None:
        """The store answered the request ``admit`` placed at ``sent_at``."""
        now = self._clock()
        self._apply(lambda state: (node_rate.answered(state, now, sent_at), None), now)

    def _apply(self, change: Callable[[RateState], tuple[RateState, T]], now: float) -> T:
        """Apply ``change``; the first process to find a minute's refusals or waits reports them."""
        results: list[T] = []
        report: list[RateState] = []

        def step(state: RateState) -> RateState:
            after, result = change(state)
            results.append(result)
            due = not after.reported_at or now - after.reported_at >= REPORT_EVERY
            if (after.refused or after.waited > 0.5) and due:
                report.append(after)
                after = node_rate.reported(after, now)
            return after

        self._book.update(step)
        if report:
            self._report(report[0], now)
        return results[-1]

    def _report(self, state: RateState, now: float) -> None:
        since = now - state.reported_at if state.reported_at else None
        window = "so far" if since is None else f"in the last {since:.0f}s"
        rate = "unpaced" if state.rate is None else f"at most {state.rate:.2f} requests/s"
        logger.warning(
            "throttling by the store (%s): this node had %d of %d request(s) refused %s, and waited %.1fs in all; "
            "the node now sends %s (cut from %.2f at the last refusal). Downloads slow down and continue; "
            "they fail only if one is refused for throttle_deadline",
            self._store,
            state.refused,
            state.granted,
            window,
            state.waited,
            rate,
            state.ceiling,
        )


__all__ = ["REPORT_EVERY", "NodeThrottle", "store_key"]
