"""A Parquet shard's requests in S3 (the moto server, counted by a loopback proxy before it): S3's
ranged GET answers the object's size and identity, so a shard needs no HEAD, and a file changed since
it was indexed is still refused before its shard is written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import write_files
from support.fault_proxy import FaultProxy
from support.s3_server import S3Bucket

from stream_plugin.errors import RemoteChangedError
from stream_plugin.format.index import parse_index
from stream_plugin.parquet import index_parquet
from stream_plugin.parquet.download import ParquetShardStore
from stream_plugin.parquet.entries import ReadView, parquet_shard
from stream_plugin.parquet.request_count import index_requests
from stream_plugin.storage import open_store


@pytest.fixture
def indexed(s3_bucket: S3Bucket, tmp_path: Path) -> Iterator[tuple[S3Bucket, FaultProxy, Path]]:
    """4 files of 3 row groups in S3, indexed in shards of one row group (the index kept locally), and
    a proxy in front of the server that logs each request: ``(bucket, proxy, index folder)``."""
    write_files(tmp_path / "data")
    s3_bucket.upload_folder(tmp_path / "data", "pq")
    index_parquet(s3_bucket.url("pq"), out=tmp_path / "index", shard_bytes=1, storage_options=s3_bucket.store_options)
    with FaultProxy((s3_bucket.server.host, s3_bucket.server.port)) as proxy:
        yield s3_bucket, proxy, tmp_path / "index"


def _store(bucket: S3Bucket, proxy: FaultProxy, index: Path) -> ParquetShardStore:
    options = {**bucket.store_options, "endpoint_url": proxy.endpoint_url}
    return ParquetShardStore(open_store(str(index)), index, ReadView(None, None), lambda url: open_store(url, **options))


def test_an_s3_shard_is_checked_on_its_first_get_without_a_head(
    indexed: tuple[S3Bucket, FaultProxy, Path], tmp_path: Path
) -> None:
    bucket, proxy, index = indexed
    store = _store(bucket, proxy, index)
    entries = parse_index((index / "index.json").read_bytes(), source="index")
    first_of_file = [entry for entry in entries if parquet_shard(entry).row_groups.start == 0]
    later = [entry for entry in entries if parquet_shard(entry).row_groups.start > 0]
    for entry in first_of_file + later:
        proxy.log.clear()
        written = store.download(entry.raw_data.basename, tmp_path / entry.raw_data.basename)
        assert written == entry.raw_data.bytes
        methods = [method for method, _, _ in proxy.log]
        # the footer (the first shard of its file), then one run of column chunks; never a HEAD
        assert methods == (["GET", "GET"] if entry in first_of_file else ["GET"]), entry.raw_data.basename
        assert index_requests(parquet_shard(entry), bucket.url("pq")) == 2


def test_an_s3_file_changed_since_indexing_is_refused_without_a_head(
    indexed: tuple[S3Bucket, FaultProxy, Path], tmp_path: Path
) -> None:
    bucket, proxy, index = indexed
    store = _store(bucket, proxy, index)
    entries = parse_index((index / "index.json").read_bytes(), source="index")
    store.download(entries[0].raw_data.basename, tmp_path / "first")  # its footer kept
    original = bytearray(bucket.get("pq/part-000.parquet"))
    original[4] ^= 0xFF  # rewritten at its size: another ETag
    bucket.put("pq/part-000.parquet", bytes(original))
    proxy.log.clear()
    with pytest.raises(RemoteChangedError, match=r"part-000.parquet: expected the Parquet file the index describes"):
        store.download(entries[1].raw_data.basename, tmp_path / "second")  # the kept footer, then its GET
    assert [method for method, _, _ in proxy.log] == ["GET"]
