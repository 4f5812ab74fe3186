"""Shared Hugging Face Trainer fixtures: a 160-sample dataset and one uninterrupted 2-rank reference run
(its shape: hf_fixtures.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

sys.path.insert(0, str(Path(__file__).parent))

from hf_fixtures import SAMPLES, Reference, train_config  # noqa: E402
from hf_rig import write_dataset  # noqa: E402
from hf_runs import run_ranks  # noqa: E402


@pytest.fixture(scope="session")
def hf_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hf-data") / "train"
    write_dataset(folder, SAMPLES)
    return folder


@pytest.fixture(scope="session")
def hf_reference(hf_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    config = train_config(hf_data, tmp_path_factory.mktemp("hf-reference"))
    run = run_ranks(config, world=2)
    assert run.codes == [0, 0], "\n".join(f"rank {rank}:\n{output[-6000:]}" for rank, output in enumerate(run.outputs))
    return Reference(config=config, run=run)
