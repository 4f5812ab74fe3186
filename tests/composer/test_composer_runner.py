"""The example runner's config handling and the autoresume helpers it relies on (no training here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import train as runner
from components import build_callbacks, resolve
from composer_harness import RUNNER

from stream_plugin.errors import ConfigError
from stream_plugin_composer import ExactDataResumption, PreemptionCheckpoint, set_aside_unfinished_checkpoints

EXAMPLE_YAML = RUNNER.parent / "tiny.yaml"


def test_the_example_yaml_loads_and_overrides_are_yaml_values() -> None:
    config = runner.load_config(
        EXAMPLE_YAML, ["save_interval=1ep", "train_loader.num_workers=0", "autoresume=false"]
    )
    assert config["save_interval"] == "1ep"
    assert config["train_loader"] == {**config["train_loader"], "name": "stream_plugin", "num_workers": 0}
    assert config["autoresume"] is False


def test_unknown_and_missing_top_level_keys_are_reported_together(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("max_duraton: 2ep\nglobal_train_batch_size: 8\nmodel: {name: tiny_model:build_model}\n")
    with pytest.raises(
        ConfigError,
        match=r"found unknown \['max_duraton'\] and missing \['max_duration', 'optimizer', 'train_loader'\]",
    ):
        runner.load_config(path)


def test_global_batch_size_must_split_evenly_over_ranks() -> None:
    assert runner.device_batch_size(16, 2) == 8
    with pytest.raises(ConfigError, match="expected an int divisible by the number of ranks 3, found 16"):
        runner.device_batch_size(16, 3)


def test_an_unregistered_loader_name_lists_the_registered_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"expected a registered name among \['stream_plugin'\].* found 'text'"
    ):
        resolve("llmfoundry_dataloaders", "text")


def test_the_runner_always_adds_the_resumption_and_preemption_callbacks() -> None:
    kinds = [type(callback) for callback in build_callbacks({})]
    assert kinds == [ExactDataResumption, PreemptionCheckpoint]


def _checkpoint(folder: Path, name: str, mtime_ns: int) -> Path:
    path = folder / name
    path.write_bytes(b"checkpoint")
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def test_checkpoints_newer_than_latest_are_set_aside_and_older_ones_kept(tmp_path: Path) -> None:
    older = _checkpoint(tmp_path, "ep0-ba10-rank0.pt", 1_000)
    completed = _checkpoint(tmp_path, "ep0-ba20-rank0.pt", 2_000)
    (tmp_path / "latest-rank0.pt").symlink_to(completed.name)
    unfinished = _checkpoint(tmp_path, "ep1-ba30-rank0.pt", 3_000)
    moved = set_aside_unfinished_checkpoints(tmp_path)
    assert moved == [tmp_path / ".unfinished-ep1-ba30-rank0.pt"]
    assert older.exists() and completed.exists() and not unfinished.exists()


def test_without_latest_every_checkpoint_file_is_set_aside(tmp_path: Path) -> None:
    _checkpoint(tmp_path, "ep0-ba10-rank0.pt", 1_000)
    (tmp_path / "notes.txt").write_text("kept")
    assert [path.name for path in set_aside_unfinished_checkpoints(tmp_path)] == [
        ".unfinished-ep0-ba10-rank0.pt"
    ]
    assert (tmp_path / "notes.txt").exists()
