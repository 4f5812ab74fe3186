"""The footers a process keeps (``FooterCache``): bounded by their bytes, least recently used dropped
first, found only under the file's size and identity."""

from __future__ import annotations

import pytest

from stream_plugin.parquet.footer_cache import FooterCache, FooterKey


def _key(file: str, identity: str = "etag=1") -> FooterKey:
    return FooterKey("s3://bucket/data", file, 1000, identity)


def test_footers_past_the_byte_bound_drop_the_least_recently_used() -> None:
    cache = FooterCache(max_bytes=250)
    cache.put(_key("a"), b"a" * 100)
    cache.put(_key("b"), b"b" * 100)
    assert cache.get(_key("a")) == b"a" * 100  # now the most recently used
    cache.put(_key("c"), b"c" * 100)
    assert (cache.get(_key("a")), cache.get(_key("b")), cache.get(_key("c"))) == (b"a" * 100, None, b"c" * 100)
    assert cache.held_bytes == 200


def test_a_footer_larger_than_the_bound_is_not_kept() -> None:
    cache = FooterCache(max_bytes=50)
    cache.put(_key("a"), b"a" * 51)
    assert cache.get(_key("a")) is None and cache.held_bytes == 0


def test_a_rewritten_file_does_not_find_its_old_footer() -> None:
    cache = FooterCache()
    cache.put(_key("a", identity="etag=1"), b"old")
    assert cache.get(_key("a", identity="etag=2")) is None


def test_fetch_reads_a_missing_footer_once_then_keeps_it() -> None:
    cache = FooterCache()
    reads: list[str] = []

    def read() -> bytes:
        reads.append("a")
        return b"footer"

    assert cache.fetch(_key("a"), read) == cache.fetch(_key("a"), read) == b"footer"
    assert reads == ["a"]


def test_a_failed_fetch_is_read_again_by_the_next_caller() -> None:
    cache = FooterCache()

    def fail() -> bytes:
        raise OSError("connection reset")

    with pytest.raises(OSError, match="connection reset"):
        cache.fetch(_key("a"), fail)
    assert cache.fetch(_key("a"), lambda: b"footer") == b"footer"


def test_a_negative_bound_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"max_bytes: expected a number of bytes >= 0, found -1; pass 0"):
        FooterCache(max_bytes=-1)
