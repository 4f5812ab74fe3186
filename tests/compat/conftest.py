"""``impl``: every compatibility scenario runs against ours, and against MosaicML 0.13 where importable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from implementations import MOSAICML, OURS, Implementation, load, mosaicml_available
from support.datasets import write_ids, write_streams


@pytest.fixture(
    params=[
        OURS,
        pytest.param(
            MOSAICML,
            marks=pytest.mark.skipif(
                not mosaicml_available(),
                reason="MosaicML Streaming 0.13 is not importable (peers environment)",
            ),
        ),
    ]
)
def impl(request: pytest.FixtureRequest) -> Iterator[Implementation]:
    implementation = load(request.param)
    yield implementation
    implementation.clean_up()


@pytest.fixture(scope="session")
def ids_117(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ids(tmp_path_factory.mktemp("compat") / "ids117", range(117))


@pytest.fixture(scope="session")
def two_streams(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Stream 0 holds ids 0..99, stream 1 ids 100..299."""
    return write_streams(tmp_path_factory.mktemp("compat2"), [100, 200])
