"""The dataset's settings are frozen once it is built; a loader's reach it once, through ``bind_loader``;
every default is written once."""

from __future__ import annotations

import inspect
import re
import warnings
from dataclasses import fields
from pathlib import Path

import pytest

import stream_plugin
from stream_plugin import ConfigError, StreamingDataLoader, StreamingDataset, World
from stream_plugin.errors import ConfigTypeError
from stream_plugin.reading.config import DEFAULTS, DatasetConfig
from stream_plugin.reading.stream import DOWNLOAD_DEFAULTS


def _dataset(remote: Path, **kwargs: object) -> StreamingDataset:
    return StreamingDataset(local=str(remote), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["batch_size", "drop_last", "shuffle_seed", "replication", "predownload"])
def test_settings_are_frozen_once_the_dataset_is_built(remote_1k: Path, name: str) -> None:
    dataset = _dataset(remote_1k, batch_size=4)
    before = dataset.config
    with pytest.raises(
        AttributeError, match=rf"StreamingDataset.{name}: expected no write once the dataset is built"
    ):
        setattr(dataset, name, 8)
    assert dataset.config is before


def test_a_write_says_where_the_setting_is_given_instead(remote_1k: Path) -> None:
    dataset = _dataset(remote_1k)
    with pytest.raises(
        AttributeError, match=r"found an assignment of 3; build the dataset with shuffle_seed=3 instead"
    ):
        dataset.shuffle_seed = 3  # type: ignore[misc]
    with pytest.raises(
        AttributeError,
        match=r"pass drop_last= to the loader \(StreamingDataLoader binds it with dataset.bind_loader",
    ):
        dataset.drop_last = True  # type: ignore[misc]
    with pytest.raises(
        AttributeError, match=r"pass batch_size= to the dataset when it is built, or to the loader"
    ):
        dataset.batch_size = 4  # type: ignore[misc]


def test_the_loader_binds_its_batch_size_once(remote_1k: Path) -> None:
    dataset = _dataset(remote_1k)
    assert dataset.batch_size is None
    StreamingDataLoader(dataset, batch_size=4, drop_last=True)
    assert (dataset.batch_size, dataset.drop_last) == (4, True)
    assert dataset.config == DatasetConfig(batch_size=4, drop_last=True)
    StreamingDataLoader(dataset, batch_size=4, drop_last=True)  # the same settings again: a no-op
    with pytest.raises(
        ConfigError,
        match=r"bind_loader: expected batch_size=4, drop_last=True \(the loader bound before\), "
        r"found batch_size=8, drop_last=True; .* build another StreamingDataset",
    ):
        StreamingDataLoader(dataset, batch_size=8, drop_last=True)
    with pytest.raises(ConfigError, match=r"found batch_size=4, drop_last=False"):
        StreamingDataLoader(dataset, batch_size=4)
    assert (dataset.batch_size, dataset.drop_last) == (4, True)


def test_a_loader_without_a_batch_size_keeps_the_datasets(remote_1k: Path) -> None:
    dataset = _dataset(remote_1k, batch_size=4)
    dataset.bind_loader(batch_size=None, drop_last=False)
    assert dataset.config == DatasetConfig(batch_size=4)
    dataset.bind_loader(batch_size=4, drop_last=False)  # comes to the same settings
    assert dataset.batch_size == 4


def test_binding_validates_the_loaders_settings(remote_1k: Path) -> None:
    dataset = _dataset(remote_1k)
    with pytest.raises(ConfigError, match="batch_size: expected a positive int or None, found 0"):
        dataset.bind_loader(batch_size=0, drop_last=False)
    with pytest.raises(ConfigTypeError, match="drop_last: expected True or False, found int 1"):
        dataset.bind_loader(batch_size=2, drop_last=1)  # type: ignore[arg-type]
    dataset.bind_loader(batch_size=2, drop_last=False)  # nothing was bound before
    assert dataset.batch_size == 2


def test_an_unset_batch_size_is_assumed_one_with_one_warning_and_stays_unset(remote_1k: Path) -> None:
    dataset = _dataset(remote_1k)
    with pytest.warns(UserWarning, match="batch_size is None; assuming 1"):
        assert len(dataset) == 1000
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dataset.global_batch_size == 1
    assert dataset.batch_size is None and dataset.config.batch_size is None


def test_a_replication_that_does_not_divide_the_world_is_refused_at_construction(remote_1k: Path) -> None:
    world = World(rank=0, world_size=3, local_rank=0, local_world_size=3)
    with pytest.raises(
        ConfigError,
        match=r"replication: expected a divisor of the world size 3, found 2; choose one of \[1, 3\]",
    ):
        _dataset(remote_1k, replication=2, world=world)
    assert DatasetConfig(replication=2).data_parallel_size(4) == 2


def test_every_default_is_written_once() -> None:
    parameters = inspect.signature(StreamingDataset.__init__).parameters
    for item in fields(DatasetConfig):
        if item.name in parameters:
            assert parameters[item.name].default == getattr(DEFAULTS, item.name), item.name
    for item in fields(DOWNLOAD_DEFAULTS):
        assert parameters[item.name].default == getattr(DOWNLOAD_DEFAULTS, item.name), item.name
    package = Path(stream_plugin.__file__).parent
    seeds = [path for path in package.rglob("*.py") if re.search(r"\b9176\b", path.read_text())]
    assert [path.relative_to(package).as_posix() for path in seeds] == ["order/plan.py"]
