"""``storage_options`` per Stream, on the single-stream dataset, on the writers and on merge_index: the
only place the endpoint comes from here (the environment names none), so two streams of one dataset
can live in two clouds."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from support.datasets import write_ids
from support.gcs_server import GcsBucket
from support.s3_server import S3Bucket

from stream_plugin import ConfigError, MDSWriter, Stream, StreamingDataLoader, StreamingDataset, merge_index
from stream_plugin.storage import S3Store, open_store


@pytest.fixture
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STORAGE_EMULATOR_HOST", "S3_ENDPOINT_URL", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


def write_with_options(url: str, options: Mapping[str, Any], ids: range) -> None:
    columns = {"id": "int", "data": "bytes"}
    with MDSWriter(out=url, columns=columns, size_limit=1 << 12, storage_options=options) as writer:
        for sample_id in ids:
            writer.write({"id": sample_id, "data": bytes([sample_id % 251]) * 40})


def test_two_streams_in_two_clouds_read_through_their_own_storage_options(
    gcs_bucket: GcsBucket, s3_bucket: S3Bucket, no_endpoint_in_env: None, tmp_path: Path
) -> None:
    write_with_options(gcs_bucket.url("a"), gcs_bucket.store_options, range(0, 100))
    write_with_options(s3_bucket.url("b"), s3_bucket.store_options, range(100, 300))
    streams = [
        Stream(
            remote=gcs_bucket.url("a"), local=str(tmp_path / "a"), storage_options=gcs_bucket.store_options
        ),
        Stream(remote=s3_bucket.url("b"), local=str(tmp_path / "b"), storage_options=s3_bucket.store_options),
    ]
    dataset = StreamingDataset(streams=streams, batch_size=10)
    # One DataLoader worker: the options travel to the worker process with the dataset.
    ids = [
        int(i) for batch in StreamingDataLoader(dataset, batch_size=10, num_workers=1) for i in batch["id"]
    ]
    assert sorted(ids) == list(range(300))
    assert dataset.node_stats().shards_downloaded == len(dataset.shards)


def test_single_stream_dataset_takes_storage_options(
    gcs_bucket: GcsBucket, no_endpoint_in_env: None, tmp_path: Path
) -> None:
    gcs_bucket.upload_folder(write_ids(tmp_path / "src", range(50)), "data")
    dataset = StreamingDataset(
        remote=gcs_bucket.url("data"),
        local=str(tmp_path / "cache"),
        storage_options=gcs_bucket.store_options,
        batch_size=10,
    )
    assert sorted(sample["id"] for sample in dataset) == list(range(50))


def test_merge_index_takes_storage_options(
    gcs_bucket: GcsBucket, no_endpoint_in_env: None, tmp_path: Path
) -> None:
    for part in range(2):
        write_with_options(
            gcs_bucket.url(f"merged/{part}"), gcs_bucket.store_options, range(50 * part, 50 * part + 50)
        )
    merge_index(gcs_bucket.url("merged"), storage_options=gcs_bucket.store_options)
    dataset = StreamingDataset(
        remote=gcs_bucket.url("merged"),
        local=str(tmp_path / "cache"),
        storage_options=gcs_bucket.store_options,
        batch_size=10,
    )
    assert sorted(sample["id"] for sample in dataset) == list(range(100))


def test_s3_credentials_in_storage_options_sign_the_requests() -> None:
    store = open_store(
        "s3://b", endpoint_url="http://127.0.0.1:1", access_key_id="explicit", secret_access_key="s"
    )
    assert isinstance(store, S3Store)
    assert not store.is_unsigned
    assert store.client().meta.region_name
    assert store.client()._request_signer._credentials.access_key == "explicit"


def test_s3_access_key_without_secret_is_a_config_error() -> None:
    with pytest.raises(
        ConfigError, match="Expected access_key_id and secret_access_key together, found only one"
    ):
        S3Store("s3://b", access_key_id="id")


def test_storage_options_that_are_not_a_dict_are_a_config_error() -> None:
    with pytest.raises(
        ConfigError, match=r"storage_options: expected a dict of option name to value.*found \['x'\]"
    ):
        Stream(remote="s3://b/x", storage_options=["x"])  # type: ignore[arg-type]


def test_an_option_the_store_does_not_take_fails_at_construction(
    gcs_bucket: GcsBucket, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"expected options of the gs:// store \(project, credentials_file, .*\), found unknown option\(s\) \['region'\]"):
        StreamingDataset(
            remote=gcs_bucket.url("data"),
            local=str(tmp_path / "c"),
            storage_options={"region": "x"},
            batch_size=1,
        )
    with pytest.raises(ConfigError, match=r"expected options of the gs:// store \(project, credentials_file, .*\), found unknown option\(s\) \['region'\]"):
        MDSWriter(out=gcs_bucket.url("out"), columns={"id": "int"}, storage_options={"region": "x"})
