"""``impl``: every compatibility scenario runs against ours, and against MosaicML where importable.

MosaicML's half carries the ``mosaicml`` mark. ``./scripts/test`` runs it in the Composer environment,
whose Composer 0.32.1 pins ``mosaicml-streaming`` 0.12.0 (``pytest tests/compat -m mosaicml``); the
peers environment has 0.13.0. The two releases' code is the same (compared file by file) but for the
version, the DataLoader's ``transformers`` import path, the Spark converter's check of pil/png/jpeg/pkl
columns, the Azure account name and credentials of downloads and uploads, and a local upload's file
name: none of it is what these scenarios run (the MDS format, the order, the dataset and loader).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from implementations import MOSAICML, OURS, Implementation, load, mosaicml_available
from support.datasets import write_ids, write_streams


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mosaicml: a compatibility scenario run against MosaicML Streaming")


@pytest.fixture(
    params=[
        OURS,
        pytest.param(
            MOSAICML,
            marks=[
                pytest.mark.mosaicml,
                pytest.mark.skipif(
                    not mosaicml_available(),
                    reason="MosaicML Streaming is not importable (the Composer and peers environments)",
                ),
            ],
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
