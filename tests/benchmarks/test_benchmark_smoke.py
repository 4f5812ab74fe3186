"""Tiny runs of the benchmark harness (our library only), so its code cannot rot; CI never installs peers."""

from __future__ import annotations

import subprocess
import sys

from support.paths import REPO_DIR


def test_write_benchmark_smoke_prints_a_table() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_write", "--smoke"],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "| write 2,000 x 1 KiB | stream_plugin |" in result.stdout
    assert "mosaicml-streaming |" not in result.stdout
