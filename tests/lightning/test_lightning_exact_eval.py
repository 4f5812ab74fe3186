"""Exact evaluation under Lightning DDP: a torchmetrics metric over the val loader equals the metric over
the whole dataset on 1, 2 and 3 ranks, with a sample count divisible by none of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torchmetrics")

from exact_eval_rig import NUM_SAMPLES, write_data  # noqa: E402

RIG = Path(__file__).resolve().parent / "exact_eval_rig.py"


@pytest.fixture(scope="module")
def val_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("exact-eval") / "val"
    write_data(folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 2, 3])
def test_validation_metric_counts_every_sample_once_on_any_rank_count(
    devices: int, val_data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(RIG), str(val_data), str(out), str(devices)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == devices
    assert result["ids"] == list(range(NUM_SAMPLES))  # every sample once: nothing lost, nothing twice
    expected_mean = sum(float(i % 13) / 7.0 for i in range(NUM_SAMPLES)) / NUM_SAMPLES
    assert result["mean"] == pytest.approx(expected_mean, rel=1e-6)
    # Without the one line the repeats would count: 101 on 2 ranks (B=4) and on 3 ranks leaves 5 for the
    # partial batch, which needs one repeat.
    assert result["naive_count"] == NUM_SAMPLES + (0 if devices == 1 else 1)
