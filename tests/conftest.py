"""Root test configuration: makes the shared rigs in tests/support importable."""

import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from support.s3_server import s3_bucket, s3_server  # noqa: E402, F401  (one moto server per session)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-minutes",
        type=float,
        default=None,
        help="run the chaos soak (tests/soak) for this many minutes instead of its 3 CI epochs",
    )
