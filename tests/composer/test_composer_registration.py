"""The YAML entry: our builder and callbacks found and called the way llm-foundry finds and calls them.

llm-foundry's registries are ``catalogue`` registries with ``entry_points=True`` over the namespaces
``("llmfoundry", "dataloaders")`` and ``("llmfoundry", "callbacks")``; its ``build_dataloader`` pops
``name`` from the ``train_loader`` section and calls the builder with the remaining keys plus
``tokenizer`` and ``device_batch_size``. These tests do the same without llm-foundry installed.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, cast

import catalogue
import pytest
from composer import Callback
from composer.core import DataSpec

from stream_plugin.errors import ConfigError
from stream_plugin.reading.loader import StreamingDataLoader
from stream_plugin_composer import (
    ExactDataResumption,
    ExitIfComplete,
    PreemptionCheckpoint,
    build_streaming_dataspec,
    streaming_dataspec,
)


def llm_foundry_build_dataloader(cfg: dict[str, Any], tokenizer: Any, device_batch_size: float) -> Any:
    """What llm-foundry 0.22's ``build_dataloader`` does (``construct_from_registry``, not partial)."""
    registry = catalogue.Registry(("llmfoundry", "dataloaders"), entry_points=True)
    cfg = dict(cfg)
    name = cfg.pop("name")
    return registry.get(name)(**cfg, tokenizer=tokenizer, device_batch_size=device_batch_size)


def llm_foundry_build_callback(name: str, kwargs: dict[str, Any]) -> Any:
    """What llm-foundry's ``build_callback`` does for a registered class (checked to be a Callback)."""
    registered = catalogue.Registry(("llmfoundry", "callbacks"), entry_points=True).get(name)
    if not issubclass(registered, Callback):
        raise ValueError(f"Expected {name} to be of type {Callback}, but got {type(registered)}")
    return registered(**kwargs)


def train_loader_section(data: Path, cache: Path, **extra: Any) -> dict[str, Any]:
    return {
        "name": "stream_plugin",
        "dataset": {"remote": str(data), "local": str(cache), "shuffle": True, "shuffle_seed": 7},
        "drop_last": False,
        "num_workers": 0,
        "pin_memory": False,
        "prefetch_factor": 2,
        "persistent_workers": True,
        "timeout": 0,
        **extra,
    }


def test_entry_points_name_our_builder_and_callbacks() -> None:
    loaders = {point.name: point.load() for point in entry_points(group="llmfoundry_dataloaders")}
    callbacks = {point.name: point.load() for point in entry_points(group="llmfoundry_callbacks")}
    assert loaders["stream_plugin"] is build_streaming_dataspec
    assert callbacks["stream_plugin_resume"] is ExactDataResumption
    assert callbacks["stream_plugin_preemption"] is PreemptionCheckpoint
    assert callbacks["stream_plugin_exit_if_complete"] is ExitIfComplete


def test_llm_foundry_style_train_loader_section_builds_a_dataspec(tiny_data: Path, tmp_path: Path) -> None:
    spec = llm_foundry_build_dataloader(train_loader_section(tiny_data, tmp_path), None, 4)
    assert isinstance(spec, DataSpec)
    assert isinstance(spec.dataloader, StreamingDataLoader)
    assert len(spec.dataloader) == 200 // 4  # batches per epoch: what makes '2ep' durations work
    batch = next(iter(spec.dataloader))
    assert spec.get_num_samples_in_batch(batch) == 4


def test_streams_written_as_a_mapping_become_streams(tiny_data: Path, tmp_path: Path) -> None:
    section = train_loader_section(tiny_data, tmp_path)
    section["dataset"] = {
        "streams": {
            "first": {"remote": str(tiny_data), "local": str(tmp_path / "a"), "proportion": 0.5},
            "second": {"remote": str(tiny_data), "local": str(tmp_path / "b"), "proportion": 0.5},
        },
        "epoch_size": 64,
    }
    spec = llm_foundry_build_dataloader(section, None, 8)
    assert len(spec.dataloader.dataset.streams) == 2
    assert len(spec.dataloader) == 64 // 8


def test_unknown_dataset_keys_are_errors_that_name_them(tiny_data: Path, tmp_path: Path) -> None:
    section = train_loader_section(tiny_data, tmp_path)
    section["dataset"]["max_seq_length"] = 2048  # a typo of llm-foundry's max_seq_len
    with pytest.raises(
        ConfigError, match=r"train_loader.dataset: expected keys among .* found unknown \['max_seq_length'\]"
    ):
        llm_foundry_build_dataloader(section, None, 4)


def test_zero_copy_columns_come_from_the_yaml_section(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from stream_plugin import MDSWriter

    data = tmp_path / "data"
    with MDSWriter(out=str(data), columns={"payload": "bytes", "extra": "bytes", "id": "int"}) as writer:
        for index in range(8):
            writer.write({"payload": bytes([index]) * 5, "extra": bytes([index]), "id": index})
    section = train_loader_section(data, tmp_path / "cache")
    section["dataset"]["zero_copy"] = ["payload"]
    yaml_section = cast(Any, OmegaConf.create(section))  # as llm-foundry hands it over: zero_copy a ListConfig
    spec = llm_foundry_build_dataloader(yaml_section, None, 4)
    assert spec.dataloader.dataset.config.zero_copy == ("payload",)
    sample = spec.dataloader.dataset[3]
    assert isinstance(sample["payload"], memoryview) and bytes(sample["payload"]) == b"\x03" * 5
    assert sample["extra"] == b"\x03"


def test_a_fractional_device_batch_size_is_an_error(tiny_data: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"device_batch_size: expected a whole number >= 1 .* found 2.5"):
        llm_foundry_build_dataloader(train_loader_section(tiny_data, tmp_path), None, 2.5)


def test_collate_fn_can_be_named_by_import_path(tiny_data: Path, tmp_path: Path) -> None:
    section = train_loader_section(tiny_data, tmp_path, collate_fn="torch.utils.data:default_collate")
    spec = llm_foundry_build_dataloader(section, None, 4)
    assert sorted(next(iter(spec.dataloader))) == ["id", "x"]


def test_registered_callbacks_build_as_composer_callbacks() -> None:
    assert isinstance(llm_foundry_build_callback("stream_plugin_resume", {}), ExactDataResumption)
    preemption = llm_foundry_build_callback("stream_plugin_preemption", {"exit_code": 75})
    assert isinstance(preemption, PreemptionCheckpoint) and preemption.exit_code == 75


def test_preemption_exit_code_must_be_non_zero() -> None:
    with pytest.raises(ConfigError, match=r"exit_code: expected an int in \[1, 255\], found 0"):
        PreemptionCheckpoint(exit_code=0)


def test_a_plain_dataloader_is_refused_with_the_reason(tiny_data: Path, tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    spec = llm_foundry_build_dataloader(train_loader_section(tiny_data, tmp_path), None, 4)
    with pytest.raises(
        ConfigError, match="expected a StreamingDataLoader over a StreamingDataset, found DataLoader"
    ):
        streaming_dataspec(DataLoader(spec.dataloader.dataset, batch_size=4))  # type: ignore[arg-type]
