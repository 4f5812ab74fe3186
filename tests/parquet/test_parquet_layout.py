"""``layout.coalesce`` (pyarrow's rule for reading nearby byte ranges at once) and the ranges the
simulator places from the index alone (``request_count.index_ranges``): pure, no I/O."""

from __future__ import annotations

from stream_plugin.parquet.entries import ParquetShard
from stream_plugin.parquet.layout import coalesce
from stream_plugin.parquet.request_count import download_requests, index_ranges, index_requests


def test_ranges_a_small_gap_apart_are_one_read() -> None:
    assert coalesce([(0, 10), (15, 20), (20 + 8, 40)], hole=8, limit=100) == [(0, 40)]


def test_ranges_a_larger_gap_apart_are_read_apart() -> None:
    assert coalesce([(0, 10), (19, 20), (30, 40)], hole=8, limit=100) == [(0, 10), (19, 20), (30, 40)]


def test_a_read_grows_no_longer_than_the_limit() -> None:
    assert coalesce([(0, 40), (41, 60), (61, 100), (101, 130)], hole=8, limit=70) == [(0, 60), (61, 130)]


def test_a_range_longer_than_the_limit_is_one_read_never_split() -> None:
    assert coalesce([(0, 5), (6, 500), (501, 510)], hole=8, limit=100) == [(0, 5), (6, 500), (501, 510)]


def test_no_ranges_are_no_reads() -> None:
    assert coalesce([], hole=8, limit=100) == []


def _shard(columns: tuple[str, ...] | None, groups: int = 4) -> ParquetShard:
    sizes = {"id": 4000 * groups, "label": 500 * groups, "score": 4000 * groups, "text": 90_000 * groups, "flag": 200 * groups}
    return ParquetShard(None, "part.parquet", 10**6, "e", range(0, groups), 1000, sizes, columns=columns)


def test_the_index_places_a_shard_of_all_columns_as_one_run() -> None:
    assert index_ranges(_shard(None)) == [(4, 4 + 98_700 * 4)]
    assert index_requests(_shard(None), "/data") == 3  # a local file: checked first (stat), the footer, one read
    assert index_requests(_shard(None), "memory://data") == 3  # fsspec: a HEAD first
    for url in ("s3://bucket/data", "gs://bucket/data", "az://container/data", "https://host/data", "hf://datasets/o/d"):
        assert index_requests(_shard(None), url) == 2, url  # the footer's GET answers the HEAD's question


def test_the_index_places_some_columns_in_each_row_group_in_schema_order() -> None:
    ranges = index_ranges(_shard(("id", "score"), groups=2))
    assert ranges == [(4, 4004), (4504, 8504), (4 + 98_700, 4004 + 98_700), (4504 + 98_700, 8504 + 98_700)]
    # 'label' (500 bytes) between them is read and dropped; 'text' (90,000) is not: one read a row group
    assert index_requests(_shard(("id", "score"), groups=2), "/data") == download_requests(2, footer_kept=False) == 4


def test_a_kept_footer_saves_one_request() -> None:
    assert download_requests(3, footer_kept=False) - download_requests(3, footer_kept=True) == 1


def test_a_store_that_answers_size_and_identity_on_a_get_needs_no_head() -> None:
    assert download_requests(1, footer_kept=True, checked_on_read=True) == 1
    assert download_requests(1, footer_kept=False, checked_on_read=True) == 2
    assert download_requests(0, footer_kept=True, checked_on_read=True) == 1  # nothing to read: a HEAD
