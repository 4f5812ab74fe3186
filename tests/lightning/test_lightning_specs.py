"""DatasetSpec / StreamSpec mirror the core's arguments exactly, so YAML and Python configs cannot drift."""

from __future__ import annotations

import inspect
import typing
from dataclasses import MISSING, fields
from typing import Any, cast

import pytest

from stream_plugin import Stream, StreamingDataset
from stream_plugin.errors import ConfigError
from stream_plugin.reading.dataset import BATCHING_METHODS, SAMPLING_METHODS, SHUFFLE_ALGOS
from stream_plugin_lightning import DatasetSpec, StreamSpec
from stream_plugin_lightning.specs import BatchingMethod, SamplingMethod, ShuffleAlgo, as_dataset_spec


def _parameters(function: typing.Callable[..., object], skip: set[str]) -> dict[str, object]:
    signature = inspect.signature(function)
    return {name: item.default for name, item in signature.parameters.items() if name not in skip | {"self"}}


def _defaults(spec: type) -> dict[str, object]:
    return {item.name: item.default for item in fields(spec) if item.default is not MISSING}


def test_dataset_spec_has_every_dataset_argument_with_its_default() -> None:
    # The DataModule fills in the batch size, the world and the data-parallel layout (from the strategy).
    layout = {"data_parallel_mesh", "data_parallel_rank", "data_parallel_size"}
    expected = _parameters(StreamingDataset.__init__, skip={"batch_size", "world", *layout})
    assert _defaults(DatasetSpec) == expected


def test_stream_spec_has_every_stream_argument_with_its_default() -> None:
    assert _defaults(StreamSpec) == _parameters(Stream.__init__, skip=set())


def test_option_literals_list_the_core_choices() -> None:
    assert typing.get_args(ShuffleAlgo) == SHUFFLE_ALGOS
    assert typing.get_args(BatchingMethod) == BATCHING_METHODS
    assert typing.get_args(SamplingMethod) == SAMPLING_METHODS


def test_a_dict_becomes_a_spec_with_stream_specs() -> None:
    spec = as_dataset_spec("train", {"streams": [{"remote": "s3://b/a", "proportion": 0.5}], "shuffle": True})
    assert spec == DatasetSpec(streams=[StreamSpec(remote="s3://b/a", proportion=0.5)], shuffle=True)
    kwargs = spec.dataset_kwargs()
    assert isinstance(kwargs["streams"][0], Stream) and kwargs["streams"][0].proportion == 0.5


def test_unknown_dataset_arguments_are_named() -> None:
    with pytest.raises(
        ConfigError, match=r"train: expected StreamingDataset arguments .* found unknown \['batch_size'\]"
    ):
        as_dataset_spec("train", {"remote": "s3://b/a", "batch_size": 4})
    with pytest.raises(ConfigError, match="val: expected a DatasetSpec or a dict"):
        as_dataset_spec("val", cast(Any, ["s3://b/a"]))


def test_dataset_spec_choices_and_defaults_come_from_the_core_config() -> None:
    from stream_plugin.order.shuffle import shuffle_choices
    from stream_plugin.reading.config import DatasetConfig

    assert typing.get_args(ShuffleAlgo) == shuffle_choices()
    assert typing.get_args(BatchingMethod) == BATCHING_METHODS
    assert typing.get_args(SamplingMethod) == SAMPLING_METHODS
    defaults = _defaults(DatasetSpec)
    assert {name: defaults[name] for name in DatasetConfig.__dataclass_fields__ if name in defaults} == {
        name: getattr(DatasetConfig(), name)
        for name in DatasetConfig.__dataclass_fields__
        if name not in ("batch_size", "drop_last")  # the loader's: the data module owns them
    }
