"""Exact evaluation under Composer: the evaluator's torchmetrics equal the metric over the whole dataset
on 1, 2 and 3 ranks (``composer -n``, gloo), with a sample count divisible by none of them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from composer_harness import BIN, TESTS_DIR, _free_port
from exact_eval_script import NUM_SAMPLES, write_data

SCRIPT = TESTS_DIR / "exact_eval_script.py"


@pytest.fixture(scope="module")
def val_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("exact-eval") / "val"
    write_data(folder)
    return folder


def evaluate(val_data: Path, root: Path, nproc: int, mode: str) -> dict[str, object]:
    out = root / "result.json"
    command = [str(BIN / "composer"), "-n", str(nproc), "--master_port", str(_free_port())]
    command += [str(SCRIPT), str(val_data), str(out), mode]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2, 3])
def test_evaluator_metric_counts_every_sample_once_on_any_rank_count(
    nproc: int, val_data: Path, tmp_path: Path
) -> None:
    result = evaluate(val_data, tmp_path, nproc, "exact")
    assert result["world_size"] == nproc
    assert result["ids"] == list(range(NUM_SAMPLES))
    expected_mean = sum(float(i % 13) / 7.0 for i in range(NUM_SAMPLES)) / NUM_SAMPLES
    assert result["mean"] == pytest.approx(expected_mean, rel=1e-6)


@pytest.mark.slow
def test_without_the_callback_the_rank_balance_repeat_is_counted(val_data: Path, tmp_path: Path) -> None:
    result = evaluate(val_data, tmp_path, 2, "plain")
    ids = result["ids"]
    assert isinstance(ids, list) and len(ids) == NUM_SAMPLES + 1  # 101 on 2 ranks: one repeat
