"""The conversion progress display and summary: samples, rate, ETA, bytes written."""

from __future__ import annotations

import pytest

from stream_plugin.converters.reporting import ConversionProgress, ConversionSummary, human_bytes


def test_progress_shows_samples_rate_eta_and_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    display = ConversionProgress(100, label="convert", enabled=True)
    display.advance(40, 3 * 1024)
    display.close()
    shown = capsys.readouterr().err
    assert "convert (3.0 KiB written, ETA " in shown and "40/100" in shown and "/s)" in shown


def test_progress_with_unknown_total_counts_what_is_known(capsys: pytest.CaptureFixture[str]) -> None:
    display = ConversionProgress(None, label="convert", enabled=True)
    for _ in range(5):
        display.advance(2, 10)
    display.close()
    shown = capsys.readouterr().err
    assert "10/10" in shown and "ETA" not in shown and display.samples == 10


def test_progress_disabled_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    display = ConversionProgress(10, label="convert", enabled=False)
    display.advance(10, 0)
    display.close()
    assert capsys.readouterr().err == ""


def test_summary_line_names_samples_bytes_parts_and_rate(capsys: pytest.CaptureFixture[str]) -> None:
    summary = ConversionSummary(parts=3, samples=1000, stored_bytes=2 * 2**20, seconds=2.0)
    summary.report("convert", "/data/out", show=True)
    assert capsys.readouterr().err.strip() == (
        "convert: wrote 1,000 samples (2.0 MiB) in 3 parts to /data/out in 2.0s (500 samples/s)"
    )
    assert human_bytes(512) == "512 B" and human_bytes(5 * 2**40) == "5.0 TiB"
