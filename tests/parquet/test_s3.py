"""A Parquet dataset in S3 (the moto server): indexed by footers, read by byte ranges, index kept
beside the data or in a local folder of the user's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TOTAL, write_files
from support.s3_server import S3Bucket

from stream_plugin import StreamingDataset
from stream_plugin.parquet import index_parquet


def test_a_parquet_dataset_in_s3_is_indexed_and_read_by_ranges(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    write_files(tmp_path / "data")
    s3_bucket.upload_folder(tmp_path / "data", "pq")
    url = s3_bucket.url("pq")
    index_parquet(url, shard_bytes=1, storage_options=s3_bucket.store_options)
    shards = json.loads(s3_bucket.get("pq/index.json"))["shards"]
    assert shards[0]["parquet"]["identity"]  # the object's ETag
    dataset = StreamingDataset(
        remote=url, local=str(tmp_path / "cache"), batch_size=8, storage_options=s3_bucket.store_options
    )
    assert sorted(int(sample["id"]) for sample in dataset) == list(range(TOTAL))
    assert dataset.node_stats().bytes_downloaded == sum(shard["raw_data"]["bytes"] for shard in shards)


def test_an_index_kept_locally_reads_its_shards_from_s3(
    s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_files(tmp_path / "data")
    s3_bucket.upload_folder(tmp_path / "data", "pq")
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)  # the source's store, from the environment
    index_parquet(s3_bucket.url("pq"), out=tmp_path / "my-index", shard_bytes=1)
    assert s3_bucket.keys("pq/") == [f"pq/part-{n:03d}.parquet" for n in range(4)]  # nothing written there
    dataset = StreamingDataset(remote=str(tmp_path / "my-index"), local=str(tmp_path / "cache"), batch_size=8)
    assert sorted(int(sample["id"]) for sample in dataset) == list(range(TOTAL))
