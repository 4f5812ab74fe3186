"""The one progress display of the writers, ``convert``, ``verify`` and the CLI, drawn by tqdm.

On a terminal it is a tqdm bar: a percent against the total where one is known, the count (samples,
rows, shards), the bytes so far, a rate and an ETA, redrawn at most 10 times a second. Anywhere else
(a pipe, a log file, CI) it draws nothing while running and prints one summary line when it closes,
so a log holds a few bytes rather than thousands of frames. tqdm is imported only when a bar is drawn.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, TextIO

from stream_plugin.redaction import redact
from stream_plugin.units import format_bytes

REDRAW_SECONDS = 0.1


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (only then is a bar redrawn in place)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class ProgressBar:
    """Counts ``unit`` done out of ``total`` (None or 0: unknown) and, optionally, bytes.

    ``enabled=False`` shows nothing at all; otherwise a bar on a terminal and a summary line elsewhere.
    Use it as a context manager or call ``close()``; the summary is printed only by ``close()``.
    """

    def __init__(
        self,
        total: int | None,
        *,
        label: str,
        unit: str = "items",
        enabled: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        self.total = total if total else None
        self.label = redact(label)  # a label may name a remote URL: its secrets never show
        self.unit = unit
        self.enabled = enabled
        self.done = 0
        self.bytes = 0
        self._stream = stream or sys.stderr
        self._started = time.monotonic()
        self._closed = False
        self._bar: Any = self._open_bar() if enabled and is_terminal(self._stream) else None

    def _open_bar(self) -> Any:
        from tqdm import tqdm

        return tqdm(
            total=self.total,
            desc=self.label,
            unit=f" {self.unit}",
            unit_scale=True,
            file=self._stream,
            mininterval=REDRAW_SECONDS,
            dynamic_ncols=True,
            leave=True,
        )

    def advance(self, amount: int = 1, *, nbytes: int = 0) -> None:
        """Count ``amount`` more units and ``nbytes`` more bytes."""
        self.done += amount
        self.bytes += nbytes
        if self._bar is not None:
            if nbytes:
                self._bar.set_postfix_str(format_bytes(self.bytes), refresh=False)
            self._bar.update(amount)

    def summary(self) -> str:
        """One line: what was done, how much, how long and how fast."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        of_total = f" of {self.total:,}" if self.total is not None and self.total != self.done else ""
        size = f", {format_bytes(self.bytes)}" if self.bytes else ""
        rate = f"{self.done / elapsed:,.0f} {self.unit}/s"
        if self.bytes:
            rate += f", {format_bytes(self.bytes / elapsed)}/s"
        return f"{self.label}: {self.done:,}{of_total} {self.unit}{size} in {elapsed:.1f}s ({rate})"

    def close(self) -> None:
        """Finish the bar on a terminal, or print the summary line elsewhere (once)."""
        if self._closed or not self.enabled:
            self._closed = True
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        else:
            print(self.summary(), file=self._stream, flush=True)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        elif self._bar is not None:
            self._bar.close()
            self._closed = True
