"""How conversions show progress: the project's progress display while they run, one summary line at the end.

Every converter goes through this module. While running, on a terminal: the ``ProgressBar`` (tqdm) of
samples written, with a percent and ETA when the total is known, a rate, and bytes stored. Off a
terminal nothing is drawn while running. At the end, one summary line (parts, samples, bytes,
seconds, samples per second) is logged and, when progress is shown, printed to stderr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

from stream_plugin.progress import ProgressBar, is_terminal
from stream_plugin.redaction import get_logger
from stream_plugin.units import format_bytes

logger = get_logger("stream_plugin.converters")


class ConversionProgress:
    """Samples written and bytes stored, drawn as the project's progress bar on a terminal only (the
    summary line of ``ConversionSummary`` replaces the bar's own off a terminal)."""

    def __init__(
        self,
        total: int | None,
        *,
        label: str,
        enabled: bool,
        inputs: int | None = None,
        stream: TextIO | None = None,
    ) -> None:
        stream = stream or sys.stderr
        self._bar = ProgressBar(
            total, label=label, unit="samples", enabled=enabled and is_terminal(stream), stream=stream
        )
        self.inputs = inputs
        self.inputs_done = 0

    @property
    def samples(self) -> int:
        return self._bar.done

    @property
    def stored_bytes(self) -> int:
        return self._bar.bytes

    def advance(self, samples: int, stored_bytes: int, inputs_done: int = 0) -> None:
        """Count ``samples`` and ``inputs_done`` more; ``stored_bytes`` is the total stored so far."""
        self._bar.advance(samples, nbytes=max(stored_bytes - self._bar.bytes, 0))
        self.inputs_done += inputs_done

    def close(self) -> None:
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
        parts = "1 part" if self.parts == 1 else f"{self.parts} parts"
        return (
            f"{caller}: wrote {self.samples:,} samples ({format_bytes(self.stored_bytes)}) in {parts} "
            f"to {out} in {self.seconds:.1f}s ({rate:,.0f} samples/s)"
        )

    def report(self, caller: str, out: str, *, show: bool) -> None:
        """Log the summary; also print it to stderr when ``show``."""
        text = self.line(caller, out)
        logger.info(text)
        if show:
            print(text, file=sys.stderr)
