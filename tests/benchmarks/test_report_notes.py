"""``benchmarks/RESULTS.md`` is generated from the stored results and ``benchmarks/notes/``: re-running a
figure must never lose what people wrote about the figures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.harness import FIGURES, REPORT, RESULTS_DIR
from benchmarks.report import NOTES_DIR, write_report


def _without_pictures(text: str) -> str:
    return re.sub(r"(?m)^!\[[^\]]*\]\([^)]*\.png\)\n\n", "", text)


def test_results_md_is_the_report_of_the_stored_results_and_the_notes(tmp_path: Path) -> None:
    rebuilt = tmp_path / "RESULTS.md"
    write_report(RESULTS_DIR, rebuilt, FIGURES, notes_dir=NOTES_DIR, plots=False)
    assert _without_pictures(REPORT.read_text()) == _without_pictures(rebuilt.read_text()), (
        "benchmarks/RESULTS.md differs from what the harness builds: edit benchmarks/notes/ (or a figure's "
        "module), then run `.venv-peers/bin/python -m benchmarks.harness --report-only`"
    )


def test_every_note_is_in_results_md() -> None:
    report = REPORT.read_text()
    notes = sorted(NOTES_DIR.glob("*.md"))
    assert notes
    for note in notes:
        assert note.read_text().strip("\n") in report, note.name


def test_a_note_follows_its_figures_section_in_order_even_unmeasured(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "iterate.2.second.md").write_text("## Second about iterate\n\nB.\n")
    (notes / "iterate.10.tenth.md").write_text("## Tenth about iterate\n\nJ.\n")
    (notes / "iterate.1.first.md").write_text("More text for the iterate section.\n")
    (notes / "write.1.only.md").write_text("## About write\n\nC.\n")
    report = tmp_path / "RESULTS.md"
    write_report(tmp_path / "no-results", report, FIGURES, notes_dir=notes, plots=False)
    text = report.read_text()
    positions = [
        text.index(part)
        for part in (
            "## About write",
            "More text for the iterate",
            "## Second about iterate",
            "## Tenth about",
        )
    ]
    assert positions == sorted(positions)
    assert text.index("## Tenth about") < text.index("## What is the same, and what differs")


@pytest.mark.parametrize("name", ["nosuchfigure.1.x.md", "iterate.first.x.md", "iterate.1.md"])
def test_a_note_not_named_for_a_figure_is_refused(tmp_path: Path, name: str) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / name).write_text("## Lost?\n")
    with pytest.raises(ValueError, match=r"expected a note named <figure>\.<n>\.<slug>\.md .* rename it"):
        write_report(tmp_path / "no-results", tmp_path / "RESULTS.md", FIGURES, notes_dir=notes, plots=False)
