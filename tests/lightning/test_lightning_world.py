"""The data module hands the Trainer's node layout to its datasets, without writing to the environment."""

from __future__ import annotations

import os
from pathlib import Path

import lightning.pytorch as pl
import pytest
from lightning_rig import dataset_specs

from stream_plugin import World
from stream_plugin_lightning import StreamingDataModule


def two_nodes_of_two_devices() -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=2,
        num_nodes=2,
        strategy="ddp",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def test_a_multi_node_trainer_layout_reaches_the_datasets_without_touching_the_environment(
    lightning_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What Lightning's launcher exports for the second process on the second node: no LOCAL_WORLD_SIZE.
    monkeypatch.setenv("NODE_RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    specs = dataset_specs(lightning_data / "remote", lightning_data / "cache")
    datamodule = StreamingDataModule(train=specs["train"], val=specs["val"], global_batch_size=8)
    datamodule.trainer = two_nodes_of_two_devices()
    environment_before = dict(os.environ)

    datamodule.setup("fit")

    assert dict(os.environ) == environment_before
    expected = World(rank=3, world_size=4, local_rank=1, local_world_size=2)
    assert datamodule.datasets["train"].world == expected
    assert datamodule.datasets["val"].world == expected
    assert datamodule.datasets["train"].global_batch_size == 8  # 4 ranks x 2 per device
