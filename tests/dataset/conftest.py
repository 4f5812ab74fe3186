from __future__ import annotations

from pathlib import Path

import pytest
from support.datasets import write_ids, write_streams


@pytest.fixture(scope="session")
def remote_1k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,000 samples in ~40 small shards: the stand-in remote for most dataset tests."""
    return write_ids(tmp_path_factory.mktemp("remote") / "data", range(1000))


@pytest.fixture(scope="session")
def mix_remote(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The seeds' mixing example: stream A has 100 samples (ids 0..99), stream B 200 (ids 100..299)."""
    return write_streams(tmp_path_factory.mktemp("mix"), [100, 200])
