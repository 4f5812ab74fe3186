"""How conversions show progress: the project's progress bar while they run, one summary line at the end.

Every converter goes through this module, so the display changes in one place. While running:
samples written, a rate, an ETA when the total is known, and bytes stored. At the end: parts,
samples, bytes, seconds and samples per second, logged and (when shown) printed to stderr.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass

from stream_plugin.progress import ProgressBar

logger = logging.getLogger("stream_plugin.converters")


def human_bytes(size: float) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


class ConversionProgress:
    """A live display of samples written, rate, ETA and bytes stored.

    The ETA comes from ``total`` samples when known, else from ``inputs`` (files, items) when known:
    the time per input so far, times the inputs left.
    """

    def __init__(self, total: int | None, *, label: str, enabled: bool, inputs: int | None = None) -> None:
        self._label = label
        self._total = total
        self._inputs = inputs
        self._bar = ProgressBar(total or 0, label=label, enabled=enabled)
        self._started = time.monotonic()
        self._drawn = 0.0
        self.samples = 0
        self.stored_bytes = 0
        self.inputs_done = 0

    def advance(self, samples: int, stored_bytes: int, inputs_done: int = 0) -> None:
        """Count ``samples`` and ``inputs_done`` more; ``stored_bytes`` is the total stored so far."""
        self.samples += samples
        self.stored_bytes = stored_bytes
        self.inputs_done += inputs_done
        now = time.monotonic()
        if now - self._drawn >= 0.1:  # at most 10 redraws a second, however fast samples come
            self._drawn = now
            self._draw(now)

    def _eta(self, elapsed: float) -> str:
        if self._total:
            rate = self.samples / elapsed
            return f", ETA {max(self._total - self.samples, 0) / max(rate, 1e-9):.0f}s"
        if self._inputs and self.inputs_done:
            left = max(self._inputs - self.inputs_done, 0)
            return f", ETA {elapsed * left / self.inputs_done:.0f}s"
        return ""

    def _draw(self, now: float) -> None:
        eta = self._eta(max(now - self._started, 1e-9))
        if not self._total:
            self._bar.total = self.samples  # an unknown total: count what is known so far
        self._bar.label = f"{self._label} ({human_bytes(self.stored_bytes)} written{eta})"
        self._bar.advance(self.samples - self._bar.done)

    def close(self) -> None:
        self._draw(time.monotonic())
        self._bar.close()


@dataclass(frozen=True)
class ConversionSummary:
    """What a finished conversion did."""

    parts: int
    samples: int
    stored_bytes: int
    seconds: float

    def line(self, caller: str, out: str) -> str:
        rate = self.samples / max(self.seconds, 1e-9)
        return (
            f"{caller}: wrote {self.samples:,} samples ({human_bytes(self.stored_bytes)}) in {self.parts} "
            f"parts to {out} in {self.seconds:.1f}s ({rate:,.0f} samples/s)"
        )

    def report(self, caller: str, out: str, *, show: bool) -> None:
        """Log the summary; also print it to stderr when ``show``."""
        text = self.line(caller, out)
        logger.info(text)
        if show:
            print(text, file=sys.stderr)
