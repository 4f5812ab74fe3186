"""A Parquet shard's requests on each remote store (moto S3, the GCS emulator and Azurite, counted by
the loopback fault proxy before each server): every store's ranged GET answers the object's size and
identity, so a shard makes no HEAD, and a file changed since it was indexed is still refused before
its shard is written; and GCS's media download as GCS answers it (a loopback server: the emulator omits
x-goog-generation). (Plain HTTP: test_requests_per_shard.py; the Hub: test_parquet_remote.py.)"""

from __future__ import annotations

import http.server
import json
import threading
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
from stream_plugin.storage.base import ObjectInfo


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


class _GcsMediaHandler(http.server.BaseHTTPRequestHandler):
    """GCS's JSON API as it answers a media download (206 with ``Content-Range`` and
    ``x-goog-generation``, which the emulator leaves out) and a metadata request, for one object."""

    body = b"PAR1" + bytes(range(60)) + b"PAR1"
    log: list[str] = []

    def do_GET(self) -> None:  # noqa: N802  (stdlib name)
        self.log.append(self.path)
        if "alt=media" in self.path:
            first, last = (int(part) for part in self.headers["Range"].removeprefix("bytes=").split("-"))
            payload = self.body[first : last + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(self.body)}")
            self.send_header("x-goog-generation", "1700000000000042")
        else:
            payload = json.dumps({"name": "f", "bucket": "b", "size": str(len(self.body)), "generation": "1700000000000042"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


def test_a_gcs_ranged_get_answers_the_size_and_generation_its_metadata_gives() -> None:
    from stream_plugin.storage.gcs import GcsStore

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _GcsMediaHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        store = GcsStore("gs://b", endpoint_url=f"http://127.0.0.1:{server.server_address[1]}", anonymous=True)
        _GcsMediaHandler.log.clear()
        data, info = store.read_range_and_info("f", 0, 4)
        assert data == b"PAR1" and len(_GcsMediaHandler.log) == 1 and "alt=media" in _GcsMediaHandler.log[0]
        assert info == store.object_info("f") == ObjectInfo(68, "generation=1700000000000042")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
