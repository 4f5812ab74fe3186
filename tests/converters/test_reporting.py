"""The conversion progress display and summary: samples, rate, ETA, bytes written; one line off a terminal."""

from __future__ import annotations

import io

import pytest

from stream_plugin.converters.reporting import ConversionProgress, ConversionSummary


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_shows_percent_samples_and_bytes() -> None:
    screen = Terminal()
    display = ConversionProgress(100, label="convert", enabled=True, stream=screen)
    display.advance(40, 3 * 1024)
    display.close()
    shown = screen.getvalue()
    assert "convert:  40%" in shown and "40.0/100" in shown and "samples/s" in shown and "3.0 KiB" in shown
    assert (display.samples, display.stored_bytes) == (40, 3 * 1024)


def test_progress_off_a_terminal_draws_nothing_while_running(capsys: pytest.CaptureFixture[str]) -> None:
    display = ConversionProgress(None, label="convert", enabled=True)
    for _ in range(5):
        display.advance(2, 10)
    display.close()
    assert capsys.readouterr().err == ""  # the summary line says it all
    assert display.samples == 10 and display.stored_bytes == 10


def test_progress_disabled_prints_nothing() -> None:
    screen = Terminal()
    display = ConversionProgress(10, label="convert", enabled=False, stream=screen)
    display.advance(10, 0)
    display.close()
    assert screen.getvalue() == ""


def test_summary_line_names_samples_bytes_parts_and_rate(capsys: pytest.CaptureFixture[str]) -> None:
    summary = ConversionSummary(parts=3, samples=1000, stored_bytes=2 * 2**20, seconds=2.0)
    summary.report("convert", "/data/out", show=True)
    assert capsys.readouterr().err.strip() == (
        "convert: wrote 1,000 samples (2.0 MiB) in 3 parts to /data/out in 2.0s (500 samples/s)"
    )
