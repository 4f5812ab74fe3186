"""The Trainer tests' shared values: the dataset's size, the reference run's shape, its record type.

The reference trains 14 optimizer steps of 2 ranks x 4 samples x 2 accumulation steps (an epoch is 10
steps, so the run crosses an epoch's end), with a checkpoint every 3 steps; every resume test starts
from one of its checkpoints and must train exactly the reference's samples at every later step.
(A module of its own, not conftest.py: test modules import these names, and ``conftest`` is a name
every test folder has.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hf_runs import Run

SAMPLES = 160
STEPS = 14
GLOBAL_BATCH = 16  # 2 ranks x 4 x 2 accumulation steps


@dataclass(frozen=True)
class Reference:
    config: dict[str, Any]
    run: Run

    def checkpoint(self, step: int) -> str:
        return str(Path(self.config["output_dir"]) / f"checkpoint-{step}")


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
