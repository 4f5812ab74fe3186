"""A Parquet shard's requests on each remote store (moto S3, the GCS emulator and Azurite, counted by
the loopback fault proxy before each server): every store's ranged GET answers the object's size and
identity, so a shard makes no HEAD, and a file changed since it was indexed is still refused before
its shard is written. (Plain HTTP: test_requests_per_shard.py; the Hub: test_parquet_remote.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_files
from support.fault_proxy import FaultProxy
from support.remotes import Remote

from stream_plugin.errors import RemoteChangedError
from stream_plugin.format.index import ShardEntry, parse_index
from stream_plugin.parquet import index_parquet
from stream_plugin.parquet.download import ParquetShardStore
from stream_plugin.parquet.entries import ReadView, parquet_shard
from stream_plugin.parquet.request_count import index_requests
from stream_plugin.storage import open_store


def _indexed(remote: Remote, proxy: FaultProxy, tmp_path: Path) -> tuple[ParquetShardStore, list[ShardEntry]]:
    """4 files of 3 row groups on the store, indexed in shards of one row group (the index kept
    locally): a shard store reading them through the proxy, and the index's entries; the log cleared."""
    write_files(tmp_path / "data")
    remote.upload_folder(tmp_path / "data", "pq")
    index = tmp_path / "index"
    index_parquet(remote.url("pq"), out=index, shard_bytes=1)
    proxy.reset_counts()
    store = ParquetShardStore(open_store(str(index)), index, ReadView(None, None), open_store)
    return store, parse_index((index / "index.json").read_bytes(), source="index")


def _requests(remote: Remote, proxy: FaultProxy) -> tuple[list[str], int]:
    """The methods of the reads the proxy saw, and how many metadata requests came besides them.

    The GCS emulator leaves ``x-goog-generation`` out of a media download's answer (GCS sends it), so
    there the store falls back to one metadata request (a JSON GET without ``alt=media``) a download."""
    reads = [method for method, target, _ in proxy.log if remote.name != "gcs" or "alt=media" in target]
    return reads, len(proxy.log) - len(reads)


def test_a_shard_on_each_store_is_checked_on_its_first_get_without_a_head(
    remote: Remote, remote_proxy: FaultProxy, tmp_path: Path
) -> None:
    store, entries = _indexed(remote, remote_proxy, tmp_path)
    first_of_file = [entry for entry in entries if parquet_shard(entry).row_groups.start == 0]
    later = [entry for entry in entries if parquet_shard(entry).row_groups.start > 0]
    for entry in first_of_file + later:
        remote_proxy.log.clear()
        written = store.download(entry.raw_data.basename, tmp_path / entry.raw_data.basename)
        assert written == entry.raw_data.bytes
        reads, metadata = _requests(remote, remote_proxy)
        # the footer (the first shard of its file), then one run of column chunks; never a HEAD
        assert reads == (["GET", "GET"] if entry in first_of_file else ["GET"]), entry.raw_data.basename
        assert metadata == (1 if remote.name == "gcs" else 0)
        assert index_requests(parquet_shard(entry), remote.url("pq")) == 2


def test_a_file_on_each_store_changed_since_indexing_is_refused_without_a_head(
    remote: Remote, remote_proxy: FaultProxy, tmp_path: Path
) -> None:
    store, entries = _indexed(remote, remote_proxy, tmp_path)
    store.download(entries[0].raw_data.basename, tmp_path / "first")  # its footer kept
    original = bytearray(remote.place.get("pq/part-000.parquet"))
    original[4] ^= 0xFF  # rewritten at its size: another ETag or generation
    remote.place.put("pq/part-000.parquet", bytes(original))
    remote_proxy.log.clear()
    with pytest.raises(RemoteChangedError, match=r"part-000.parquet: expected the Parquet file the index describes"):
        store.download(entries[1].raw_data.basename, tmp_path / "second")  # the kept footer, then its GET
    assert _requests(remote, remote_proxy) == (["GET"], 1 if remote.name == "gcs" else 0)
