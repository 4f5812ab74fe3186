"""Accelerate: prepare() keeps our loader (no second split), save_state/load_state resume it exactly,
on 2 ranks and from 2 ranks to 1 (real gloo runs, torchrun's environment)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hf_rig import write_dataset
from support.ranks import launch_ranks

pytestmark = pytest.mark.slow

RIG = Path(__file__).with_name("accelerate_rig.py")
SAMPLES = 160
STEPS = 24  # 2 ranks x 4: 20 steps an epoch, so the runs cross an epoch's end


def run(config: dict[str, Any], world: int) -> tuple[list[dict[str, Any]], dict[int, list[int]]]:
    outputs = launch_ranks(
        [sys.executable, str(RIG), json.dumps(config)], world=world, ranks_per_node=world, timeout=240
    )
    steps: dict[int, list[int]] = {}
    for output in outputs:
        for step, ids in output["steps"].items():
            steps.setdefault(int(step), []).extend(ids)
    return outputs, {step: sorted(ids) for step, ids in sorted(steps.items())}


@pytest.fixture(scope="module")
def accelerate_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, list[int]]]:
    root = tmp_path_factory.mktemp("accelerate")
    write_dataset(root / "data", SAMPLES)
    config = {
        "data": str(root / "data"),
        "batch_size": 4,
        "steps": STEPS,
        "save_at": 7,
        "save_dir": str(root / "state"),
    }
    outputs, steps = run(config, world=2)
    assert all(output["prepared_is_loader"] for output in outputs)
    return root, steps


def test_prepare_keeps_the_loader_and_an_epoch_trains_every_sample_once(
    accelerate_reference: tuple[Path, dict[int, list[int]]],
) -> None:
    _, steps = accelerate_reference
    epoch = sorted(i for step in range(1, 21) for i in steps[step])
    assert epoch == list(range(SAMPLES))


@pytest.mark.parametrize(("world", "batch_size"), [(2, 4), (1, 8)])
def test_load_state_continues_exactly(
    accelerate_reference: tuple[Path, dict[int, list[int]]], world: int, batch_size: int
) -> None:
    root, reference = accelerate_reference
    config = {
        "data": str(root / "data"),
        "batch_size": batch_size,
        "steps": STEPS,
        "start_step": 7,
        "resume": str(root / "state"),
        "num_workers": 2,
        "start_method": "spawn",  # macOS's default
    }
    _, steps = run(config, world=world)
    assert steps == {step: reference[step] for step in range(8, STEPS + 1)}
