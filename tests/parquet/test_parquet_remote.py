"""A Parquet dataset on the Hub (the loopback Hub, ``refs/convert/parquet``): indexed into a local ``out``
folder, then read with ``StreamingDataset``: every row once, the bytes fetched equal to the ranges (each
file's footer once), rate
limits waited out, the indexed commit kept. (S3's counterpart: tests/parquet/test_s3.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TOTAL, write_files
from support.hub_server import HubServer, hub_server  # noqa: F401  (the fixture)

from stream_plugin import StreamingDataset
from stream_plugin.errors import RemoteChangedError
from stream_plugin.parquet import index_parquet


def _entries(out: Path) -> list[dict]:
    return json.loads((out / "index.json").read_text())["shards"]


def _ids(out: Path, local: Path) -> list[int]:
    dataset = StreamingDataset(remote=str(out), local=str(local), batch_size=8, download_retry=0)
    return [int(sample["id"]) for sample in dataset]


def _cached_bytes(local: Path) -> int:
    return sum(path.stat().st_size for path in local.rglob("*.parquet") if path.is_file())


def _hub_dataset(server: HubServer, folder: Path, ref: str = "refs/convert/parquet") -> str:
    files = {f"default/train/{path.name}": path.read_bytes() for path in sorted(folder.iterdir())}
    return server.commit("org/ds", {**files, "README.md": b"# ds"}, ref=ref)


def test_a_hub_dataset_reads_every_row_once_fetching_only_the_ranges(
    hub_server: HubServer, tmp_path: Path  # noqa: F811
) -> None:
    write_files(tmp_path / "files")
    commit = _hub_dataset(hub_server, tmp_path / "files")
    index_parquet(
        "hf://datasets/org/ds@refs%2Fconvert%2Fparquet/default/train", out=tmp_path / "index", shard_bytes=1
    )
    entries = _entries(tmp_path / "index")
    assert all(f"commit={commit} " in entry["parquet"]["identity"] for entry in entries)
    hub_server.requests.clear()

    assert sorted(_ids(tmp_path / "index", tmp_path / "cache")) == list(range(TOTAL))
    fetched = sum(request.sent for request in hub_server.requests if request.status == 206)
    ranges = sum(entry["raw_data"]["bytes"] for entry in entries)
    footers = {entry["parquet"]["file"]: entry["parquet"]["footer_bytes"] for entry in entries}
    assert ranges == _cached_bytes(tmp_path / "cache")
    assert fetched == ranges - sum(entry["parquet"]["footer_bytes"] for entry in entries) + sum(footers.values())
    assert not [request for request in hub_server.requests if request.status == 200 and request.sent > 0 and
                request.path.endswith(".parquet")]  # never a whole file


def test_a_rate_limited_hub_is_waited_out_while_reading(hub_server: HubServer, tmp_path: Path) -> None:  # noqa: F811
    write_files(tmp_path / "files")
    _hub_dataset(hub_server, tmp_path / "files")
    index_parquet("hf://datasets/org/ds@refs%2Fconvert%2Fparquet/default/train", out=tmp_path / "index", shard_bytes=1)
    hub_server.throttle(2, reset_seconds=1, path_contains="/resolve/")
    # download_retry=0: a 429 is no failed attempt; the reader waits as the RateLimit header says.
    assert sorted(_ids(tmp_path / "index", tmp_path / "cache")) == list(range(TOTAL))
    assert [request.status for request in hub_server.requests].count(429) == 2


def test_the_index_pins_the_hub_commit(hub_server: HubServer, tmp_path: Path) -> None:  # noqa: F811
    write_files(tmp_path / "files")
    _hub_dataset(hub_server, tmp_path / "files")
    index_parquet("hf://datasets/org/ds@refs%2Fconvert%2Fparquet/default/train", out=tmp_path / "index", shard_bytes=1)
    write_files(tmp_path / "other", rows=20)  # another commit on the same ref: other files, other row groups
    _hub_dataset(hub_server, tmp_path / "other")

    # Either way the rows of the new commit are never read under the old index: the index records
    # the commit in each file's identity (and, where it records the source at its commit, reads that).
    source = _entries(tmp_path / "index")[0]["parquet"]["source"]
    if "@" in source and "refs" not in source:  # the source recorded at its commit: the first one is read
        assert sorted(_ids(tmp_path / "index", tmp_path / "cache")) == list(range(TOTAL))
    else:  # the source recorded at its ref: the files at the new commit are refused
        with pytest.raises(RemoteChangedError, match=r"identity commit=.*found it changed"):
            _ids(tmp_path / "index", tmp_path / "cache")


@pytest.mark.parametrize("lfs", [True, False])
def test_a_hub_shard_is_checked_on_its_first_get_without_a_head(
    hub_server: HubServer, tmp_path: Path, lfs: bool  # noqa: F811
) -> None:
    from stream_plugin.format.index import parse_index
    from stream_plugin.parquet.download import ParquetShardStore
    from stream_plugin.parquet.entries import ReadView, parquet_shard
    from stream_plugin.storage import open_store

    hub_server.lfs_threshold = 1024 if lfs else 1 << 30  # LFS: a redirect with X-Linked-Etag to the CDN
    write_files(tmp_path / "files")
    _hub_dataset(hub_server, tmp_path / "files")
    index = tmp_path / "index"
    index_parquet("hf://datasets/org/ds@refs%2Fconvert%2Fparquet/default/train", out=index, shard_bytes=1)
    store = ParquetShardStore(open_store(str(index)), index, ReadView(None, None), open_store)
    entries = parse_index((index / "index.json").read_bytes(), source="index")
    for entry in sorted(entries, key=lambda entry: parquet_shard(entry).row_groups.start):
        hub_server.requests.clear()
        assert store.download(entry.raw_data.basename, tmp_path / entry.raw_data.basename) == entry.raw_data.bytes
        resolves = [request.method for request in hub_server.requests if "/resolve/" in request.path]
        first_of_file = parquet_shard(entry).row_groups.start == 0
        # the footer (the first shard of its file), then one run of column chunks; the commit and ETag of
        # the Hub's answer match the index's, so no HEAD
        assert resolves == (["GET", "GET"] if first_of_file else ["GET"]), entry.raw_data.basename
        assert not [request for request in hub_server.requests if request.method == "HEAD"]
