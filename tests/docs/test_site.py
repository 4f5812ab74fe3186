"""The documentation site builds with ``mkdocs build --strict``: every page is in the navigation, every
link between pages and every anchor resolves, the README sections that docs/index.md includes exist,
and the API reference finds every name it lists (mkdocs.yml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO_DIR


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (
        f"mkdocs build --strict failed:\n{result.stdout[-3000:]}{result.stderr[-5000:]}"
    )
    index = (site / "index.html").read_text()
    assert "make_loader" in index, "docs/index.md should include the README's example"
    api = (site / "api" / "index.html").read_text()
    assert "Streams samples from one or more" in api, (
        "the API reference should hold StreamingDataset's docstring"
    )
    assert (
        "github.com/stream-plugin/stream-plugin/blob/main/benchmarks/RESULTS.md"
        in (site / "benchmarks" / "index.html").read_text()
    )
