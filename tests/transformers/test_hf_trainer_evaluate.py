"""Trainer.evaluate over a StreamingDataset counts every sample once on 2 ranks (gloo), repeats cut out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hf_rig import write_dataset
from hf_runs import RIG
from support.ranks import launch_ranks

pytestmark = pytest.mark.slow

EVAL_SAMPLES = 37  # 2 ranks x batches of 4: one rank's last batch ends with a rank-balance repeat


def test_evaluate_counts_every_sample_once_on_two_ranks_with_workers(tmp_path: Path) -> None:
    write_dataset(tmp_path / "train", 16)
    write_dataset(tmp_path / "eval", EVAL_SAMPLES)
    config = {
        "trainer": "streaming",
        "data": str(tmp_path / "train"),
        "eval_data": str(tmp_path / "eval"),
        "output_dir": str(tmp_path / "out"),
        "batch_size": 4,
        "max_steps": 1,
        "num_workers": 2,
        "evaluate_only": True,
    }
    outputs = launch_ranks(
        [sys.executable, str(RIG), json.dumps(config)], world=2, ranks_per_node=2, timeout=240
    )
    for output in outputs:
        metrics = output["metrics"]
        assert metrics["eval_count"] == EVAL_SAMPLES
        assert metrics["eval_distinct"] == EVAL_SAMPLES
        assert metrics["eval_sum"] == sum(range(EVAL_SAMPLES))
        # The untrained weight is 0: each sample's loss is (id / 100) ** 2; the mean is over samples.
        expected = sum((i / 100) ** 2 for i in range(EVAL_SAMPLES)) / EVAL_SAMPLES
        assert metrics["eval_loss"] == pytest.approx(expected, rel=1e-6)
    seen = sorted(i for output in outputs for batch in output["eval"] for i in batch)
    assert seen == list(range(EVAL_SAMPLES))  # the model itself never ran on a repeat


def test_a_plain_trainer_with_the_data_callback_refuses_to_train(tmp_path: Path) -> None:
    write_dataset(tmp_path / "train", 16)
    config = {
        "trainer": "plain+callback",
        "data": str(tmp_path / "train"),
        "output_dir": str(tmp_path / "out"),
        "batch_size": 4,
        "max_steps": 2,
    }
    result = subprocess.run(
        [sys.executable, str(RIG), json.dumps(config)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "use stream_plugin_transformers.StreamingTrainer" in result.stderr
