"""A dependency-free progress bar for command-line tools (stderr, redrawn at most 10 times a second)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Counts work done out of ``total``; draws only when ``enabled`` (so tests and pipes stay quiet)."""

    def __init__(self, total: int, *, label: str, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total = max(total, 0)
        self.label = label
        self.enabled = enabled
        self.done = 0
        self._stream = stream or sys.stderr
        self._started = time.monotonic()
        self._last_draw = 0.0

    def advance(self, amount: int = 1) -> None:
        self.done += amount
        now = time.monotonic()
        if self.enabled and (now - self._last_draw >= 0.1 or self.done >= self.total):
            self._last_draw = now
            self._draw(now)

    def close(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            self._stream.write("\n")
            self._stream.flush()

    def _draw(self, now: float) -> None:
        width = 30
        fraction = self.done / self.total if self.total else 1.0
        filled = int(width * min(fraction, 1.0))
        rate = self.done / max(now - self._started, 1e-9)
        bar = "#" * filled + "-" * (width - filled)
        self._stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} ({rate:,.0f}/s)")
        self._stream.flush()
