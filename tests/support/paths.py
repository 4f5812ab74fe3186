"""Paths shared by tests."""

from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = TESTS_DIR.parent
# A copy of ../shared/fixtures (real MosaicML Streaming 0.13 datasets), so a fresh clone is self-contained.
FIXTURES_DIR = TESTS_DIR / "fixtures" / "mosaicml-streaming-0.13"
