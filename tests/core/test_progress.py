"""The progress display: a tqdm bar on a terminal, one summary line anywhere else."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from stream_plugin import MDSWriter
from stream_plugin.progress import ProgressBar


class Terminal(io.StringIO):
    """A text stream that says it is a terminal, as stderr does in an interactive shell."""

    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_bar_shows_percent_count_bytes_rate_and_eta() -> None:
    screen = Terminal()
    with ProgressBar(200, label="verify", unit="shards", stream=screen) as bar:
        for _ in range(100):
            bar.advance(nbytes=1 << 20)
    drawn = screen.getvalue()
    assert "verify:" in drawn
    assert " 50%|" in drawn
    assert "100/200" in drawn
    assert "shards/s" in drawn
    assert "100.0 MiB" in drawn
    assert "<" in drawn  # elapsed<remaining: the ETA


def test_on_a_terminal_an_unknown_total_shows_the_count_and_rate() -> None:
    screen = Terminal()
    with ProgressBar(None, label="convert", unit="rows", stream=screen) as bar:
        bar.advance(1234)
    assert "1.23k rows" in screen.getvalue()
    assert "%" not in screen.getvalue()


def test_off_a_terminal_only_one_summary_line_is_printed() -> None:
    log = io.StringIO()
    with ProgressBar(10, label="verify", unit="shards", stream=log) as bar:
        for _ in range(4):
            bar.advance(nbytes=2048)
    lines = log.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("verify: 4 of 10 shards, 8.0 KiB in ")
    assert "shards/s" in lines[0]


def test_a_disabled_display_prints_nothing() -> None:
    for stream in (io.StringIO(), Terminal()):
        with ProgressBar(10, label="verify", enabled=False, stream=stream) as bar:
            bar.advance()
        assert stream.getvalue() == ""


def test_a_failed_run_prints_no_summary() -> None:
    log = io.StringIO()
    try:
        with ProgressBar(10, label="verify", stream=log) as bar:
            bar.advance()
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert log.getvalue() == ""


def test_the_writers_progress_bar_summarises_samples_and_bytes(tmp_path: Path) -> None:
    script = (
        "from stream_plugin import MDSWriter\n"
        f"with MDSWriter(out={str(tmp_path / 'out')!r}, columns={{'a': 'bytes'}}, size_limit='64kb', progress_bar=True) as w:\n"
        "    for _ in range(1000):\n"
        "        w.write({'a': bytes(1000)})\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    [line] = result.stderr.splitlines()
    assert line.startswith("mds writer: 1,000 samples, ")
    assert "samples/s" in line


def test_tqdm_is_imported_only_when_a_bar_is_drawn() -> None:
    check = (
        "import sys, io, stream_plugin\n"
        "from stream_plugin.progress import ProgressBar\n"
        "ProgressBar(3, label='x', stream=io.StringIO()).close()\n"
        "assert 'tqdm' not in sys.modules, 'tqdm was imported'\n"
    )
    subprocess.run([sys.executable, "-c", check], check=True)


def test_writer_without_progress_bar_is_silent(tmp_path: Path, capsys: object) -> None:
    with MDSWriter(out=str(tmp_path / "out"), columns={"a": "int"}) as writer:
        writer.write({"a": 1})
    captured = capsys.readouterr()  # type: ignore[attr-defined]
    assert captured.err == ""
