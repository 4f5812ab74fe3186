"""Per-device batch size x data-parallel ranks against the global batch size: derived, or a clear error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightning_rig import dataset_specs

from stream_plugin import EvalLoader
from stream_plugin.errors import ConfigError
from stream_plugin_lightning import StreamingDataModule
from stream_plugin_lightning.batch_sizes import BatchSizes, resolve_batch_sizes
from stream_plugin_lightning.mesh import DataParallelMesh


@pytest.mark.parametrize(
    ("batch_size", "global_batch_size", "world", "replication", "expected"),
    [
        (None, 8, 1, 1, BatchSizes(8, 1)),
        (None, 8, 2, 1, BatchSizes(4, 2)),
        (4, 8, 2, 1, BatchSizes(4, 2)),
        (4, None, 3, 1, BatchSizes(4, 3)),
        (None, 8, 4, 2, BatchSizes(4, 2)),  # 4 ranks in pairs that read the same data
    ],
)
def test_batch_sizes_are_derived_or_checked(
    batch_size: int | None, global_batch_size: int | None, world: int, replication: int, expected: BatchSizes
) -> None:
    assert resolve_batch_sizes(batch_size, global_batch_size, world, replication) == expected


@pytest.mark.parametrize(
    ("batch_size", "global_batch_size", "world", "replication", "message"),
    [
        (
            None,
            8,
            3,
            1,
            r"global_batch_size: expected a multiple of the 3 data-parallel ranks \(world size 3\), found 8, "
            r"which does not split evenly; run on a data-parallel size in \[1, 2, 4, 8\]",
        ),
        (
            4,
            8,
            4,
            1,
            r"batch_size: expected batch_size x 4 data-parallel ranks \(world size 4\) = global_batch_size=8, "
            r"found 4 x 4 = 16; set batch_size=2 or leave batch_size unset",
        ),
        (4, 12, 8, 1, r"found 4 x 8 = 32; run on a data-parallel size in \[1, 2, 3, 4, 6, 12\]"),
        (
            None,
            8,
            4,
            3,
            r"replication: expected a divisor of the world size 4, found 3; choose one of \[1, 2, 4\]",
        ),
        (None, None, 1, 1, "expected batch_size .per device. or global_batch_size, found neither"),
    ],
)
def test_bad_batch_sizes_explain_the_fix(
    batch_size: int | None, global_batch_size: int | None, world: int, replication: int, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_batch_sizes(batch_size, global_batch_size, world, replication)


def test_setup_checks_the_global_batch_against_the_detected_world(
    lightning_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The launcher's environment stands in for torch.distributed: rank 0 of 3.
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    specs = dataset_specs(lightning_data / "remote", lightning_data / "cache")
    datamodule = StreamingDataModule(train=specs["train"], global_batch_size=8)
    with pytest.raises(
        ConfigError, match="global_batch_size: expected a multiple of the 3 data-parallel ranks"
    ):
        datamodule.setup("fit")


def test_the_eval_batch_size_applies_to_val_only(lightning_data: Path) -> None:
    specs = dataset_specs(lightning_data / "remote", lightning_data / "cache")
    datamodule = StreamingDataModule(
        train=specs["train"], val=specs["val"], global_batch_size=8, eval_batch_size=5
    )
    datamodule.setup("fit")
    assert datamodule.train_dataloader().batch_size == 8
    val = datamodule.val_dataloader()
    assert isinstance(val, EvalLoader) and val.batch_size == 5
    assert datamodule.test_dataloader() == []  # no test split: Lightning skips the stage


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"batch_size": 0}, "batch_size: expected a positive int or None, found 0"),
        (
            {"global_batch_size": 8, "eval_batch_size": -1},
            "eval_batch_size: expected a positive int or None, found -1",
        ),
        ({}, "expected batch_size .per device. or global_batch_size, found neither"),
        ({"batch_size": 4, "num_workers": -1}, r"num_workers: expected an int >= 0, found -1"),
        ({"batch_size": 4, "persistent_workers": True}, "persistent_workers: expected num_workers > 0"),
    ],
)
def test_bad_loader_settings_fail_at_construction(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        StreamingDataModule(**arguments)


def test_fit_without_train_data_is_explained(lightning_data: Path) -> None:
    specs = dataset_specs(lightning_data / "remote", lightning_data / "cache")
    with pytest.raises(ConfigError, match="expected train data for fit, found train=None"):
        StreamingDataModule(val=specs["val"], batch_size=4).setup("fit")


def test_under_a_device_mesh_batch_sizes_count_its_data_parallel_ranks() -> None:
    # ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=2) on 4 ranks: 2 read data.
    mesh = DataParallelMesh(mesh=None, dims=("data_parallel",), size=2)
    assert resolve_batch_sizes(None, 8, 4, mesh=mesh) == BatchSizes(per_device=4, data_parallel_size=2)
    with pytest.raises(
        ConfigError,
        match=r"batch_size: expected batch_size x 2 data-parallel ranks \(device mesh dims \['data_parallel'\] "
        r"of world size 4\) = global_batch_size=8, found 2 x 2 = 4; set batch_size=4",
    ):
        resolve_batch_sizes(2, 8, 4, mesh=mesh)
