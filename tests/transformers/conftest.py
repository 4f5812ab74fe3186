"""Shared Hugging Face Trainer fixtures: a 160-sample dataset and one uninterrupted 2-rank reference run.

The reference trains 14 optimizer steps of 2 ranks x 4 samples x 2 accumulation steps (an epoch is 10
steps, so the run crosses an epoch's end), with a checkpoint every 3 steps; every resume test starts from
one of its checkpoints and must train exactly the reference's samples at every later step.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

sys.path.insert(0, str(Path(__file__).parent))

from hf_rig import write_dataset  # noqa: E402
from hf_runs import Run, run_ranks  # noqa: E402

SAMPLES = 160
STEPS = 14
GLOBAL_BATCH = 16  # 2 ranks x 4 x 2 accumulation steps


@dataclass(frozen=True)
class Reference:
    config: dict[str, Any]
    run: Run

    def checkpoint(self, step: int) -> str:
        return str(Path(self.config["output_dir"]) / f"checkpoint-{step}")


@pytest.fixture(scope="session")
def hf_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hf-data") / "train"
    write_dataset(folder, SAMPLES)
    return folder


def train_config(data: Path, output_dir: Path, **overrides: Any) -> dict[str, Any]:
    return {
        "trainer": "streaming",
        "data": str(data),
        "output_dir": str(output_dir),
        "batch_size": 4,
        "grad_accum": 2,
        "max_steps": STEPS,
        "save_steps": 3,
        **overrides,
    }


@pytest.fixture(scope="session")
def hf_reference(hf_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    config = train_config(hf_data, tmp_path_factory.mktemp("hf-reference"))
    run = run_ranks(config, world=2)
    assert run.codes == [0, 0], run.outputs
    return Reference(config=config, run=run)
