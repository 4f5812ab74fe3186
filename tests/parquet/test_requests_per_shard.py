"""The requests a Parquet shard's download makes, counted on a loopback HTTP server: a file's footer
fetched once per process, column chunks a small gap apart read in one request, the simulator's count
(``index_requests``) equal to a first download's, and the bytes written unchanged."""

from __future__ import annotations

import functools
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.ranged_http import RangedFileHandler

from stream_plugin import StreamingDataset
from stream_plugin.format.index import parse_index
from stream_plugin.parquet import index_parquet
from stream_plugin.parquet.download import ParquetShardStore
from stream_plugin.parquet.entries import ReadView, parquet_shard
from stream_plugin.parquet.layout import coalesce, leaves_per_column, shard_ranges
from stream_plugin.parquet.request_count import (
    CHECKED_ON_READ_SCHEMES,
    HOLE_BYTES,
    READ_LIMIT_BYTES,
    download_requests,
    index_requests,
)
from stream_plugin.storage import open_store

GROUPS, ROWS = 4, 1000  # one file of 4 row groups: 4 shards of one row group each


class _CountingHandler(RangedFileHandler):
    """Serves byte ranges and records each request as ``(method, Range header or None)``."""

    def __init__(self, *args: Any, log: list[tuple[str, str | None]], **kwargs: Any) -> None:
        self.log = log
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # noqa: N802  (stdlib name)
        self.log.append(("GET", self.headers.get("Range")))
        super().do_GET()

    def do_HEAD(self) -> None:  # noqa: N802  (stdlib name)
        self.log.append(("HEAD", None))
        super().do_HEAD()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str, list[tuple[str, str | None]]]]:
    """A Parquet file of five columns (``id, label, score, text, flag``), indexed in shards of one row
    group, served on loopback: ``(folder, URL, the requests it answered)``."""
    folder = tmp_path / "site"
    folder.mkdir()
    rng = np.random.default_rng(7)
    ids = np.arange(GROUPS * ROWS, dtype=np.int64)
    letters = rng.integers(97, 123, size=(GROUPS * ROWS, 60), dtype=np.uint8)
    table = pa.table(
        {
            "id": ids,
            "label": (ids % 7).astype(np.int8),  # about 0.5 KB a row group: the small gap between id and score
            "score": ids.astype(np.float64) / 2,
            "text": [row.tobytes().decode() for row in letters],  # about 64 KB a row group: a large gap
            "flag": ids % 2 == 0,
        }
    )
    pq.write_table(table, folder / "part-000.parquet", row_group_size=ROWS, compression="none")
    index_parquet(folder, shard_bytes=1)
    log: list[tuple[str, str | None]] = []
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_CountingHandler, directory=str(folder), log=log)
    )
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    _as_served(folder / "index.json", open_store(url).object_info("part-000.parquet").identity)  # type: ignore[attr-defined]
    log.clear()
    try:
        yield folder, url, log
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _as_served(index: Path, identity: str | None) -> None:
    """The index written from the folder, with the file's identity as the server gives it (its
    Last-Modified) in place of the local file's."""
    found = json.loads(index.read_text())
    for entry in found["shards"]:
        entry["parquet"]["identity"] = identity
    index.write_text(json.dumps(found))


def _download_each_shard(
    served: tuple[Path, str, list[tuple[str, str | None]]], columns: tuple[str, ...] | None, dest: Path
) -> list[list[tuple[str, str | None]]]:
    """Each shard downloaded in turn through one ``ParquetShardStore``: the requests of each, and the
    local copies checked against the original file's ranges and footer."""
    folder, url, log = served
    view = ReadView(columns=columns, local=None)
    store = ParquetShardStore(open_store(url), folder, view, open_store)
    original = (folder / "part-000.parquet").read_bytes()
    metadata = pq.read_metadata(folder / "part-000.parquet")
    leaves = leaves_per_column(metadata.schema.to_arrow_schema())
    requests = []
    entries = [view.entry(entry) for entry in parse_index((folder / "index.json").read_bytes(), source="index")]
    for number, entry in enumerate(entries):
        shard = parquet_shard(entry)
        log.clear()
        store.download(entry.raw_data.basename, dest / f"{number}.parquet")
        requests.append(list(log))
        wanted = sorted(leaf for name in shard.read_columns for leaf in leaves[name])
        expected = b"".join(original[start:end] for start, end in shard_ranges(metadata, shard.row_groups, wanted))
        assert (dest / f"{number}.parquet").read_bytes() == expected + original[-shard.footer_bytes :]
    return requests


def test_the_second_shard_of_a_file_does_not_fetch_its_footer_again(
    served: tuple[Path, str, list[tuple[str, str | None]]], tmp_path: Path
) -> None:
    requests = _download_each_shard(served, None, tmp_path)
    footer = f"bytes={(served[0] / 'part-000.parquet').stat().st_size - parquet_shard(parse_index((served[0] / 'index.json').read_bytes(), source='index')[0]).footer_bytes}-"
    footer_reads = [[request for request in shard if (request[1] or "").startswith(footer)] for shard in requests]
    assert [len(reads) for reads in footer_reads] == [1, 0, 0, 0]
    # all columns: one run of bytes a shard; the footer once, one read; the file checked on its first GET
    # (Content-Range's total and Last-Modified), never by a HEAD
    assert [len(shard) for shard in requests] == [2, 1, 1, 1]
    assert [method for method, _ in requests[1]] == ["GET"]


def test_column_chunks_a_small_gap_apart_are_read_in_one_request(
    served: tuple[Path, str, list[tuple[str, str | None]]], tmp_path: Path
) -> None:
    # 'label' (about 0.5 KB) lies between 'id' and 'score': read and dropped, one GET where there were two
    requests = _download_each_shard(served, ("id", "score"), tmp_path)
    assert [len(shard) for shard in requests] == [2, 1, 1, 1]
    folder = served[0]
    metadata = pq.read_metadata(folder / "part-000.parquet")
    chunks = shard_ranges(metadata, range(0, 1), [0, 2])
    assert len(chunks) == 2 and len(coalesce(chunks, HOLE_BYTES, READ_LIMIT_BYTES)) == 1


def test_column_chunks_a_large_gap_apart_are_read_apart(
    served: tuple[Path, str, list[tuple[str, str | None]]], tmp_path: Path
) -> None:
    # 'label', 'score' and 'text' (about 70 KB a row group) lie between 'id' and 'flag'
    requests = _download_each_shard(served, ("id", "flag"), tmp_path)
    assert [len(shard) for shard in requests] == [3, 2, 2, 2]


@pytest.mark.parametrize("columns", [None, ("id", "score"), ("id", "flag"), ("label", "text")])
def test_the_simulators_count_is_a_first_downloads_requests(
    served: tuple[Path, str, list[tuple[str, str | None]]], tmp_path: Path, columns: tuple[str, ...] | None
) -> None:
    folder = served[0]
    view = ReadView(columns=columns, local=None)
    entries = [view.entry(entry) for entry in parse_index((folder / "index.json").read_bytes(), source="index")]
    requests = _download_each_shard(served, columns, tmp_path)
    counted = [index_requests(parquet_shard(entry), served[1]) for entry in entries]
    assert counted == [len(requests[0])] * GROUPS  # each counted as its file's first (the footer fetched)
    assert [len(shard) for shard in requests[1:]] == [counted[0] - 1] * (GROUPS - 1)
    assert download_requests(counted[0] - 1, footer_kept=True, checked_on_read=True) == len(requests[1])


def test_a_stream_over_http_decodes_the_rows_of_coalesced_reads(
    served: tuple[Path, str, list[tuple[str, str | None]]], tmp_path: Path
) -> None:
    _, url, log = served
    dataset = StreamingDataset(remote=url, local=str(tmp_path / "cache"), batch_size=8, columns=["id", "score"])
    samples = list(dataset)
    assert sorted(int(sample["id"]) for sample in samples) == list(range(GROUPS * ROWS))
    assert all(sample["score"] == sample["id"] / 2 for sample in samples)
    assert sum(1 for method, _ in log if method == "GET") == 1 + 1 + GROUPS  # index.json, one footer, a read a shard


def test_the_simulator_counts_a_parquet_shards_requests_by_the_same_rule(
    served: tuple[Path, str, list[tuple[str, str | None]]],
) -> None:
    from stream_plugin.simulate.config import load_workload

    workload = load_workload(str(served[0]), {"batch_size": 4})
    assert workload.requests_per_shard.tolist() == [download_requests(1, footer_kept=False)] * GROUPS == [3] * GROUPS


def test_the_schemes_checked_on_read_are_the_stores_that_answer_it() -> None:
    from stream_plugin.storage.gcs import GcsStore
    from stream_plugin.storage.gcs_hmac import GcsHmacStore
    from stream_plugin.storage.registry import BUILTIN_BACKENDS

    for scheme, backend in BUILTIN_BACKENDS.items():
        factory = backend.load(scheme)
        stores = [GcsStore, GcsHmacStore] if scheme == "gs" else [factory]  # gs: a function picks one of two
        answers = all(isinstance(store, type) and hasattr(store, "read_range_and_info") for store in stores)
        assert answers == (scheme in CHECKED_ON_READ_SCHEMES), scheme
    assert "gs" in CHECKED_ON_READ_SCHEMES and "file" not in CHECKED_ON_READ_SCHEMES


def test_a_ranged_get_over_http_answers_the_size_and_identity_a_head_does(
    served: tuple[Path, str, list[tuple[str, str | None]]],
) -> None:
    from stream_plugin.storage.base import range_total

    assert range_total("bytes 0-9/1234") == 1234
    assert range_total("bytes 0-9/*") is None and range_total(None) is None
    _, url, log = served
    data, info = open_store(url).read_range_and_info("part-000.parquet", 0, 4)  # type: ignore[attr-defined]
    assert data == b"PAR1" and log == [("GET", "bytes=0-3")]
    assert info == open_store(url).object_info("part-000.parquet")  # type: ignore[attr-defined]
