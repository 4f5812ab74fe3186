"""MosaicML's validations, warnings and names that code written for it relies on, kept beside ours."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from support.datasets import write_ids

from stream_plugin import Stream, StreamingDataLoader, StreamingDataset
from stream_plugin.errors import ConfigError


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ids(tmp_path_factory.mktemp("phrases") / "data", range(120), size_limit=1 << 10)


def test_an_invalid_sampling_method_also_says_mosaicmls_phrase(folder: Path) -> None:
    with pytest.raises(ConfigError, match=r"sampling_method: expected one of .*found 'ayo' \(Invalid sampling method: ayo\)"):
        StreamingDataset(local=str(folder), batch_size=1, sampling_method="ayo")


def test_predownload_below_batch_size_warns_as_mosaicml_does(folder: Path) -> None:
    with pytest.warns(UserWarning, match=r"predownload < batch_size \(4 < 8\)\. This may result in slower batch time"):
        StreamingDataset(local=str(folder), batch_size=8, predownload=4)


def test_a_block_shuffle_smaller_than_a_shard_warns_once_when_read(folder: Path) -> None:
    dataset = StreamingDataset(
        local=str(folder), batch_size=4, shuffle=True, shuffle_algo="py1e", shuffle_block_size=3, num_canonical_nodes=1
    )
    with pytest.warns(UserWarning, match="Shuffle block size was smaller than shard size") as caught:
        for _ in StreamingDataLoader(dataset, batch_size=4):
            pass
        for _ in StreamingDataLoader(dataset, batch_size=4):
            pass
    assert sum("Shuffle block size" in str(warning.message) for warning in caught) == 1


def test_a_block_as_large_as_a_shard_does_not_warn(folder: Path) -> None:
    largest = int(StreamingDataset(local=str(folder), batch_size=4).samples_per_shard.max())
    dataset = StreamingDataset(local=str(folder), batch_size=4, shuffle=True, shuffle_block_size=largest)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        next(iter(StreamingDataLoader(dataset, batch_size=4)))


def test_mosaicmls_dataset_attributes_length_streams_and_offsets(folder: Path, tmp_path: Path) -> None:
    other = write_ids(tmp_path / "other", range(120, 240), size_limit=1 << 10)
    dataset = StreamingDataset(streams=[Stream(local=str(folder)), Stream(local=str(other))], batch_size=4)
    per_shard = dataset.samples_per_shard
    assert dataset.length == len(dataset) == 240
    assert dataset.num_streams == 2
    np.testing.assert_array_equal(dataset.sample_offset_per_shard, np.concatenate([[0], np.cumsum(per_shard)[:-1]]))
    np.testing.assert_array_equal(dataset.sample_offset_per_stream, [0, 120])


def test_a_streams_download_settings_read_back_as_given() -> None:
    stream = Stream(local="/tmp/unused", download_retry=5, download_timeout=30.0, validate_hash="sha1", keep_zip=True)
    assert (stream.download_retry, stream.download_timeout, stream.validate_hash, stream.keep_zip) == (5, 30.0, "sha1", True)
    assert Stream(local="/tmp/unused").download_retry is None


def test_the_loader_takes_mosaicmls_state_argument_and_counts_samples_yielded(folder: Path) -> None:
    loader = StreamingDataLoader(StreamingDataset(local=str(folder), batch_size=4), batch_size=4)
    batches = iter(loader)
    next(batches), next(batches)
    assert loader.num_samples_yielded == 8
    state = loader.state_dict()
    fresh = StreamingDataLoader(StreamingDataset(local=str(folder), batch_size=4), batch_size=4)
    fresh.load_state_dict(obj=state)
    assert next(iter(fresh))["id"].tolist() == next(batches)["id"].tolist()
