"""Writers and merge_index with a remote ``out`` on every object store (S3, GCS, Azure Blob; real
servers on loopback, see ``support.remotes``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fault_proxy import FaultProxy
from support.remotes import Remote

from stream_plugin import JSONWriter, MDSWriter, StorageError, StreamingDataset, merge_index


def write(out: str | tuple[str, str], count: int = 300, start: int = 0, **kwargs: object) -> None:
    with MDSWriter(out=out, columns={"id": "int", "text": "str"}, size_limit=2048, **kwargs) as writer:
        for i in range(start, start + count):
            writer.write({"id": i, "text": f"sample {i}"})


def test_remote_out_uploads_every_shard_and_the_index_last(remote: Remote) -> None:
    write(remote.url("out"), compression="zstd")
    keys = remote.keys("out/")
    assert "out/index.json" in keys and len(keys) > 3
    assert all(key.endswith((".mds.zstd", "index.json")) for key in keys)


def test_a_dataset_written_to_a_remote_reads_back(remote: Remote, tmp_path: Path) -> None:
    write((str(tmp_path / "staging"), remote.url("pair")), keep_local=True)
    assert (tmp_path / "staging" / "index.json").exists()
    dataset = StreamingDataset(remote=remote.url("pair"), local=str(tmp_path / "cache"), batch_size=10)
    assert sorted(sample["id"] for sample in dataset) == list(range(300))


def test_json_writer_uploads_data_and_meta_files(remote: Remote) -> None:
    with JSONWriter(out=remote.url("json"), columns={"n": "int"}) as writer:
        for n in range(10):
            writer.write({"n": n})
    assert set(remote.keys("json/")) == {
        "json/index.json",
        "json/shard.00000.json",
        "json/shard.00000.json.meta",
    }


def test_an_upload_failure_raises_and_never_publishes_the_index(
    remote: Remote, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One writer thread uploads in shard order: the first upload passes, every later one fails.
    with FaultProxy((remote.host, remote.port), [remote.upload_rule("http_500", skip=1)]) as proxy:
        remote.point_at(monkeypatch, proxy.endpoint_url)
        with pytest.raises(StorageError, match=r"shard\.00001\.mds"):
            write(remote.url("broken"), retry=2, max_workers=1)
    assert "broken/index.json" not in remote.keys("broken/")


def test_a_transient_upload_failure_is_retried(remote: Remote, monkeypatch: pytest.MonkeyPatch) -> None:
    with FaultProxy((remote.host, remote.port), [remote.upload_rule("http_503", limit=1)]) as proxy:
        remote.point_at(monkeypatch, proxy.endpoint_url)
        write(remote.url("flaky"), retry=3)
        assert proxy.injected["http_503"] == 1
    assert "flaky/index.json" in remote.keys("flaky/")


def test_merge_index_combines_parallel_remote_writers(remote: Remote, tmp_path: Path) -> None:
    parts = [remote.url(f"merged/{part}") for part in range(3)]
    for part, url in enumerate(parts):
        write(url, count=100, start=100 * part)
    merge_index([f"{url}/index.json" for url in parts], remote.url("merged"))
    assert "merged/index.json" in remote.keys("merged/")
    dataset = StreamingDataset(remote=remote.url("merged"), local=str(tmp_path / "cache"), batch_size=10)
    assert sorted(sample["id"] for sample in dataset) == list(range(300))


def test_exist_ok_overwrites_a_dataset_on_every_store(remote: Remote, tmp_path: Path) -> None:
    write(remote.url("again"), count=120)
    write(remote.url("again"), count=40, start=5000, exist_ok=True)
    dataset = StreamingDataset(remote=remote.url("again"), local=str(tmp_path / "cache"), batch_size=10)
    assert sorted(int(sample["id"]) for sample in dataset) == list(range(5000, 5040))
