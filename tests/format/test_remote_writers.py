"""Writers and merge_index with a remote ``out`` on a real S3 endpoint (moto on loopback)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fault_proxy import FaultProxy, FaultRule
from support.s3_server import S3Bucket

from stream_plugin import JSONWriter, MDSWriter, StorageError, StreamingDataset, merge_index


def write(out: str | tuple[str, str], count: int = 300, start: int = 0, **kwargs: object) -> None:
    with MDSWriter(out=out, columns={"id": "int", "text": "str"}, size_limit=2048, **kwargs) as writer:
        for i in range(start, start + count):
            writer.write({"id": i, "text": f"sample {i}"})


def test_remote_out_uploads_every_shard_and_the_index_last(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    write(s3_bucket.url("out"), compression="zstd")
    keys = s3_bucket.keys("out/")
    assert "out/index.json" in keys and len(keys) > 3
    assert all(key.endswith((".mds.zstd", "index.json")) for key in keys)


def test_a_dataset_written_to_s3_reads_back(
    s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    write((str(tmp_path / "staging"), s3_bucket.url("pair")), keep_local=True)
    assert (tmp_path / "staging" / "index.json").exists()
    dataset = StreamingDataset(remote=s3_bucket.url("pair"), local=str(tmp_path / "cache"), batch_size=10)
    assert sorted(sample["id"] for sample in dataset) == list(range(300))


def test_json_writer_uploads_data_and_meta_files(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    with JSONWriter(out=s3_bucket.url("json"), columns={"n": "int"}) as writer:
        for n in range(10):
            writer.write({"n": n})
    assert set(s3_bucket.keys("json/")) == {
        "json/index.json",
        "json/shard.00000.json",
        "json/shard.00000.json.meta",
    }


def test_an_upload_failure_raises_and_never_publishes_the_index(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = [FaultRule("http_500", kinds=frozenset({"put"}), path_contains="shard.00001", every=1)]
    with FaultProxy((s3_bucket.server.host, s3_bucket.server.port), rules) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.endpoint_url)
        with pytest.raises(StorageError, match=r"shard\.00001\.mds"):
            write(s3_bucket.url("broken"), retry=2)
    assert "broken/index.json" not in s3_bucket.keys("broken/")


def test_a_transient_upload_failure_is_retried(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    rules = [FaultRule("http_503", kinds=frozenset({"put"}), path_contains="shard.00000", every=1, limit=1)]
    with FaultProxy((s3_bucket.server.host, s3_bucket.server.port), rules) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.endpoint_url)
        write(s3_bucket.url("flaky"), retry=3)
        assert proxy.injected["http_503"] == 1
    assert "flaky/index.json" in s3_bucket.keys("flaky/")


def test_merge_index_combines_parallel_remote_writers(
    s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    parts = [s3_bucket.url(f"merged/{part}") for part in range(3)]
    for part, url in enumerate(parts):
        write(url, count=100, start=100 * part)
    merge_index([f"{url}/index.json" for url in parts], s3_bucket.url("merged"))
    assert "merged/index.json" in s3_bucket.keys("merged/")
    dataset = StreamingDataset(remote=s3_bucket.url("merged"), local=str(tmp_path / "cache"), batch_size=10)
    assert sorted(sample["id"] for sample in dataset) == list(range(300))
