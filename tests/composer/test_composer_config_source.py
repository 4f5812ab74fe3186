"""The Composer YAML builder takes the dataset's option names and choices from the core's one source."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.order.shuffle import shuffle_choices
from stream_plugin.reading.config import DatasetConfig
from stream_plugin_composer import build_streaming_dataspec
from stream_plugin_composer.config import DATASET_KEYS


def test_yaml_dataset_keys_include_every_dataset_config_option() -> None:
    assert {item.name for item in fields(DatasetConfig)} - {"drop_last"} <= set(DATASET_KEYS)  # the loader's


def test_a_yaml_shuffle_algo_outside_the_registry_is_refused_with_its_choices(
    tiny_data: Path, tmp_path: Path
) -> None:
    section = {"remote": str(tiny_data), "local": str(tmp_path / "cache"), "shuffle_algo": "py9"}
    listed = ", ".join(repr(name) for name in shuffle_choices())
    with pytest.raises(ConfigError, match=rf"shuffle_algo: expected one of \[{listed}\], found 'py9'"):
        build_streaming_dataspec(dataset=section, tokenizer=None, device_batch_size=4)
