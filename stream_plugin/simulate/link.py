"""A node's link: the downloads in flight share its bandwidth equally (processor sharing).

Every transfer on the link receives ``bandwidth / n`` bytes per second while ``n`` are active. The
link keeps one number for all of them, the bytes each active transfer has received so far
(``service``), so a transfer that joins at ``service = s`` with ``b`` bytes finishes when ``service``
reaches ``s + b``: joining, finishing and finding the next finish cost O(log n), whatever ``n``.
"""

from __future__ import annotations

import heapq


class Link:
    """One node's download bandwidth, shared by its transfers in flight."""

    def __init__(self, bandwidth: float) -> None:
        self._bandwidth = bandwidth
        self._clock = 0.0
        self._service = 0.0  # bytes each active transfer has received since the link was built
        self._finish: list[tuple[float, int]] = []  # heap: (service at which it finishes, transfer)
        self.version = 0  # changes whenever the next finish may have moved

    def _advance(self, time: float) -> None:
        if time > self._clock:
            if self._finish:
                self._service += (time - self._clock) * self._bandwidth / len(self._finish)
            self._clock = time

    def add(self, time: float, transfer: int, size: float) -> None:
        """``transfer`` starts receiving its ``size`` bytes at ``time``."""
        self._advance(time)
        heapq.heappush(self._finish, (self._service + size, transfer))
        self.version += 1

    def next_finish(self) -> float | None:
        """When the first active transfer finishes, if nothing joins before; None when idle."""
        if not self._finish:
            return None
        left = max(0.0, self._finish[0][0] - self._service)
        return self._clock + left * len(self._finish) / self._bandwidth

    def finished(self, time: float) -> list[int]:
        """The transfers finished by ``time`` (at ``next_finish``), removed from the link."""
        self._advance(time)
        done = []
        tolerance = 1e-9 * max(1.0, self._service)
        while self._finish and self._finish[0][0] <= self._service + tolerance:
            done.append(heapq.heappop(self._finish)[1])
        if done:
            self.version += 1
        return done


__all__ = ["Link"]
