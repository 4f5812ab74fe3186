"""A remote ``out`` that already holds a dataset: refused unless ``exist_ok``; overwriting takes the old
index.json down before the first new shard, so no reader sees an index that mixes two writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.fault_proxy import FaultProxy
from support.paths import REPO_DIR
from support.s3_server import S3Bucket

from stream_plugin import MDSWriter, StreamingDataset
from stream_plugin.errors import IndexFormatError
from stream_plugin.format.writer_base import OutputExistsError


def write(out: str | tuple[str, str], count: int = 300, start: int = 0, **kwargs: object) -> None:
    with MDSWriter(out=out, columns={"id": "int", "text": "str"}, size_limit=2048, **kwargs) as writer:
        for i in range(start, start + count):
            writer.write({"id": i, "text": f"sample {i}"})


def test_a_remote_that_holds_a_dataset_is_refused_without_exist_ok(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    write(s3_bucket.url("ds"))
    before = {key: s3_bucket.get(key) for key in s3_bucket.keys("ds/")}
    with pytest.raises(OutputExistsError, match=r"s3://.*/ds: expected an empty or new remote output, found it holds files; pass exist_ok=True"):
        write(s3_bucket.url("ds"), start=1000)
    assert {key: s3_bucket.get(key) for key in s3_bucket.keys("ds/")} == before


def test_a_file_url_remote_that_holds_a_dataset_is_refused_without_exist_ok(tmp_path: Path) -> None:
    write(f"file://{tmp_path / 'remote'}")
    with pytest.raises(OutputExistsError, match=r"found it holds files( \(Directory is not empty\))?; pass exist_ok=True"):
        write(f"file://{tmp_path / 'remote'}", start=1000)


def test_exist_ok_overwrites_a_remote_dataset_deleting_its_old_index_first(
    s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    write(s3_bucket.url("ds"))
    with FaultProxy((s3_bucket.server.host, s3_bucket.server.port)) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.endpoint_url)
        write(s3_bucket.url("ds"), count=50, start=1000, exist_ok=True)
        requests = [(method, target.split("?")[0]) for method, target, _ in proxy.log]
    index_delete = requests.index(("DELETE", "/" + s3_bucket.url("ds/index.json").removeprefix("s3://")))
    first_put = next(n for n, (method, _) in enumerate(requests) if method == "PUT")
    assert index_delete < first_put
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    dataset = StreamingDataset(remote=s3_bucket.url("ds"), local=str(tmp_path / "cache"), batch_size=10)
    assert sorted(sample["id"] for sample in dataset) == list(range(1000, 1050))


_CHILD = textwrap.dedent(
    """
    import sys
    from stream_plugin.format.writer import MDSWriter

    with MDSWriter(out=sys.argv[1], columns={"i": "int", "s": "str"}, size_limit=2048, exist_ok=True) as writer:
        i = 0
        while True:  # until killed
            writer.write({"i": i, "s": "y" * (i % 50)})
            i += 1
    """
)


def _kill_mid_write(out: str, shards_seen: object) -> None:
    """Run a writer over ``out`` until ``shards_seen()`` says it uploaded new shards, then SIGKILL it."""
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, out], env=env)
    try:
        deadline = time.monotonic() + 60
        while not shards_seen():  # type: ignore[operator]
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.slow
def test_sigkill_mid_overwrite_of_an_s3_dataset_leaves_no_index(
    s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    write(s3_bucket.url("ds"), count=800)
    old = {key: s3_bucket.get(key) for key in s3_bucket.keys("ds/") if "shard" in key}

    def rewritten() -> bool:
        present = set(s3_bucket.keys("ds/"))
        return sum(key in present and s3_bucket.get(key) != data for key, data in old.items()) >= 3

    _kill_mid_write(s3_bucket.url("ds"), rewritten)
    assert "ds/index.json" not in s3_bucket.keys("ds/")
    with pytest.raises(FileNotFoundError):
        StreamingDataset(remote=s3_bucket.url("ds"), local=str(tmp_path / "cache"), batch_size=10)


@pytest.mark.slow
def test_sigkill_mid_overwrite_of_a_local_dataset_leaves_no_index(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    write(str(out), count=2000)
    old = {path.name: path.stat().st_ino for path in out.glob("shard.*")}

    def rewritten() -> bool:
        return sum(path.name in old for path in out.glob("shard.*")) >= 3 and not (out / "index.json").exists()

    _kill_mid_write(str(out), rewritten)
    assert not (out / "index.json").exists()
    with pytest.raises(IndexFormatError, match="expected an index file, found none"):
        StreamingDataset(local=str(out), batch_size=10)
