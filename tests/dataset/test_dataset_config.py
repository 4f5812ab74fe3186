"""DatasetConfig: the dataset's options in one frozen, validated value, and what derives from it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stream_plugin import ConfigError, Stream, StreamingDataset
from stream_plugin.order.shuffle import SpanKey, register_shuffle, shuffle_choices, unregister_shuffle
from stream_plugin.reading.config import DatasetConfig


def _reverse_span(ids: np.ndarray, shard_bounds: np.ndarray, key: SpanKey) -> None:
    ids[:] = ids[::-1].copy()


@pytest.fixture
def mine() -> Iterator[str]:
    register_shuffle("mine", "mine_alias")(_reverse_span)
    try:
        yield "mine"
    finally:
        unregister_shuffle("mine")


def test_fingerprint_is_unchanged_for_the_same_data_and_settings(mix_remote: list[Path]) -> None:
    # Resume states written by earlier versions carry these values: they must keep loading.
    first, second = mix_remote
    plain = StreamingDataset(local=str(first), batch_size=4)
    assert plain.state_dict()["fingerprint"] == "5215232c602b9de2"
    mixed = StreamingDataset(
        streams=[Stream(local=str(first), proportion=0.25), Stream(local=str(second), proportion=0.75)],
        batch_size=4,
        epoch_size="250",
        shuffle=True,
        shuffle_algo="py1br",
        shuffle_seed=7,
        shuffle_block_size=64,
        batching_method="stratified",
        sampling_method="fixed",
        sampling_granularity=2,
    )
    assert mixed.state_dict()["fingerprint"] == "889771cd8877af5b"
    unshuffled = StreamingDataset(local=str(first), batch_size=4, shuffle_algo="py1s", shuffle_seed=3)
    assert unshuffled.state_dict()["fingerprint"] == "88fea6d813a67ad4"


def test_registered_shuffle_is_accepted_by_the_dataset_and_changes_the_order(
    mine: str, remote_1k: Path
) -> None:
    def order(algo: str) -> list[int]:
        dataset = StreamingDataset(local=str(remote_1k), batch_size=4, shuffle=True, shuffle_algo=algo)
        return [sample["id"] for sample in dataset]

    assert "mine" in shuffle_choices() and "mine_alias" in shuffle_choices()
    reversed_spans, unshuffled_spans = order(mine), order("none")
    assert sorted(reversed_spans) == list(range(1000))
    assert reversed_spans != unshuffled_spans
    assert order("mine_alias") == reversed_spans


def test_unknown_shuffle_is_refused_with_the_registry_list(mine: str, remote_1k: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"shuffle_algo: expected one of \['none', .*'py1e', .*'mine', 'mine_alias'\], found 'py9'; .*"
        r"register_shuffle",
    ):
        StreamingDataset(local=str(remote_1k), batch_size=4, shuffle_algo="py9")


def test_unregistered_shuffle_is_refused_again(remote_1k: Path) -> None:
    register_shuffle("fleeting")(_reverse_span)
    unregister_shuffle("fleeting")
    assert "fleeting" not in shuffle_choices()
    with pytest.raises(ConfigError, match="found 'fleeting'"):
        DatasetConfig(shuffle_algo="fleeting")
    with pytest.raises(ConfigError, match=r"expected a registered name among \[.*'block'.*\] to unregister"):
        unregister_shuffle("fleeting")


def test_shuffle_choices_list_each_name_then_its_aliases() -> None:
    assert shuffle_choices()[:3] == ("none", "permute", "naive")


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"batch_size": 0}, ConfigError, r"batch_size: expected a positive int or None, found 0"),
        ({"predownload": True}, TypeError, r"predownload: expected a positive int or None, found bool True"),
        ({"replication": 2.0}, TypeError, r"replication: expected a positive int or None, found float 2.0"),
        (
            {"sampling_granularity": None},
            TypeError,
            r"sampling_granularity: expected an int >= 1, found None; pass 1 or more",
        ),
        (
            {"epoch_size": -1},
            ConfigError,
            r"epoch_size: expected an int >= 0 or None, found -1; pass a sample",
        ),
        ({"shuffle_seed": "7"}, TypeError, r"shuffle_seed: expected an int, found str '7'; pass an int seed"),
        ({"shuffle": 1}, TypeError, r"shuffle: expected True or False, found int 1"),
        (
            {"batching_method": "zigzag"},
            ConfigError,
            r"batching_method: expected one of \['random', .*found 'zigzag'",
        ),
        (
            {"sampling_method": "lucky"},
            ConfigError,
            r"sampling_method: expected one of \['balanced', 'fixed'\]",
        ),
        ({"partition_algo": "fast"}, ConfigError, r"partition_algo: expected one of \['orig', 'relaxed'\]"),
    ],
)
def test_dataset_config_validates_its_options(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        DatasetConfig(**options)


def test_dataset_config_from_arguments_reads_sizes_flags_and_seeds() -> None:
    config = DatasetConfig.from_arguments(epoch_size="2k", cache_limit="1mb", shuffle=1, shuffle_seed="7")
    assert (config.epoch_size, config.cache_limit, config.shuffle, config.shuffle_seed) == (
        2000,
        1 << 20,
        True,
        7,
    )
    assert DatasetConfig.from_arguments() == DatasetConfig()


def test_dataset_config_is_frozen() -> None:
    with pytest.raises(AttributeError):
        DatasetConfig().batch_size = 4  # type: ignore[misc]


def test_dataset_config_names_are_the_dataset_arguments_in_order() -> None:
    import inspect

    arguments = list(inspect.signature(StreamingDataset.__init__).parameters)
    names = [item.name for item in fields(DatasetConfig) if item.name != "drop_last"]  # the loader's
    assert [name for name in arguments if name in names] == names


def test_order_settings_and_fingerprint_derive_from_the_config() -> None:
    config = DatasetConfig(shuffle_algo="py1s", shuffle_seed=3, epoch_size=10)
    assert config.order_settings.shuffle_algo == "none"  # no shuffle: the name does not shape the order
    shuffled = DatasetConfig(shuffle=True, shuffle_algo="py1s", shuffle_seed=3, epoch_size=10)
    assert shuffled.order_settings.shuffle_algo == "py1s"
    # Golden values: resume states written by earlier versions carry them, so they must never change.
    assert shuffled.fingerprint(["i"], ["w"]) == "ceedffc8ffcbe0c2"
    assert config.fingerprint(["i"], ["w"]) == "6bf960b41f00a3e5"
    assert DatasetConfig().fingerprint([], []) == "6a71132d4d697ad1"
    # Each input that shapes the order changes it.
    changed = [
        shuffled.fingerprint(["j"], ["w"]),
        shuffled.fingerprint(["i"], ["v"]),
        DatasetConfig(shuffle=True, shuffle_algo="py1s", shuffle_seed=4, epoch_size=10).fingerprint(["i"], ["w"]),
        DatasetConfig(shuffle=True, shuffle_algo="py1s", shuffle_seed=3, epoch_size=11).fingerprint(["i"], ["w"]),
        DatasetConfig(shuffle=True, shuffle_algo="py1e", shuffle_seed=3, epoch_size=10).fingerprint(["i"], ["w"]),
    ]
    assert len({shuffled.fingerprint(["i"], ["w"]), *changed}) == 1 + len(changed)
    # Options that do not shape the order leave the fingerprint alone.
    assert DatasetConfig(predownload=8, cache_limit=1 << 30).fingerprint(
        [], []
    ) == DatasetConfig().fingerprint([], [])


def test_dataset_reads_its_options_from_the_config(remote_1k: Path) -> None:
    dataset = StreamingDataset(local=str(remote_1k), shuffle=True, shuffle_seed=5, replication=None)
    assert dataset.config == DatasetConfig(shuffle=True, shuffle_seed=5)
    assert (dataset.shuffle, dataset.shuffle_seed, dataset.replication, dataset.batch_size) == (
        True,
        5,
        1,
        None,
    )
    dataset.bind_loader(batch_size=8, drop_last=False)
    assert dataset.batch_size == dataset.config.batch_size == 8
    with pytest.raises(AttributeError):
        dataset.shuffle_seed = 6  # type: ignore[misc]
