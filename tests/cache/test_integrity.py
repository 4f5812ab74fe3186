"""Data already on disk: a rewritten remote under a warm cache, validate_hash of cached and local-only
shards, and symlinked sub-folders leading out of the cache."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.fault_proxy import FaultProxy
from support.s3_server import S3Bucket

from stream_plugin.cache import CacheConfig
from stream_plugin.cache.shard_cache import ShardCache
from stream_plugin.errors import RemoteChangedError, ShardIntegrityError, UnsafePathError
from stream_plugin.format.index import INDEX_BASENAME
from stream_plugin.storage import S3Store


def fill(dataset: Any, local: Path, **options: object) -> ShardCache:
    cache = ShardCache(CacheConfig(local=str(local), remote=str(dataset.remote), **options))  # type: ignore[arg-type]
    for entry in cache.open_index():
        cache.ensure(entry)
    return cache


def rewrite_in_place(dataset: Any) -> None:
    """New shard bytes under the same names and sizes; index.json rewritten with the same bytes."""
    for entry in dataset.entries:
        path = dataset.remote / entry.raw_data.basename
        path.write_bytes(os.urandom(path.stat().st_size))
    index = dataset.remote / INDEX_BASENAME
    replacement = dataset.remote / "index.new"
    replacement.write_bytes(index.read_bytes())
    os.replace(replacement, index)


def flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_remote_rewritten_under_a_warm_cache_is_refused_naming_both_identities(
    make_dataset: Callable[..., Any], local: Path
) -> None:
    dataset = make_dataset(hashes=())
    fill(dataset, local)
    rewrite_in_place(dataset)
    with pytest.raises(RemoteChangedError, match=r"found it rewritten \(mtime_ns=.*\); the cached shards may belong to the old dataset\. Delete"):
        ShardCache(CacheConfig(local=str(local), remote=str(dataset.remote))).fetch_index()


def test_an_unchanged_remote_reuses_the_warm_cache(make_dataset: Callable[..., Any], local: Path) -> None:
    dataset = make_dataset()
    first = fill(dataset, local)
    again = ShardCache(CacheConfig(local=str(local), remote=str(dataset.remote)))
    assert again.fetch_index() == local / INDEX_BASENAME
    assert again.index_identity() == first.index_identity() is not None


def test_a_remote_index_deleted_under_a_warm_cache_is_refused(
    make_dataset: Callable[..., Any], local: Path
) -> None:
    dataset = make_dataset()
    fill(dataset, local)
    (dataset.remote / INDEX_BASENAME).unlink()
    with pytest.raises(RemoteChangedError, match="found none \\(the remote dataset was deleted, or is being rewritten\\)"):
        ShardCache(CacheConfig(local=str(local), remote=str(dataset.remote))).fetch_index()


def test_an_unreachable_remote_reads_a_complete_cache_offline(
    make_dataset: Callable[..., Any],
    s3_bucket: S3Bucket,
    local: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    dataset = make_dataset()
    s3_bucket.upload_folder(dataset.remote, dataset.remote.name)
    url = s3_bucket.url(dataset.remote.name)
    proxy = FaultProxy((s3_bucket.server.host, s3_bucket.server.port)).start()
    store = S3Store(url, endpoint_url=proxy.endpoint_url)
    config = CacheConfig(local=str(local), remote=url, download_retry=0, download_timeout=2.0)
    cache = ShardCache(config, store)
    for entry in cache.open_index():
        cache.ensure(entry)
    proxy.stop()  # connections are refused from now on
    offline = ShardCache(config, S3Store(url, endpoint_url=proxy.endpoint_url))
    with caplog.at_level(logging.WARNING, logger="stream_plugin.cache.shard_cache"):
        entries = offline.open_index()
    assert "could not check whether the remote index changed" in caplog.text
    for entry in entries:
        offline.ensure(entry)
    dataset.assert_intact(local)


def test_validate_hash_verifies_a_cached_shard_once_and_fetches_a_corrupt_one_again(
    make_dataset: Callable[..., Any], local: Path
) -> None:
    dataset = make_dataset(hashes=("sha1",))
    fill(dataset, local)
    flip_a_bit(local / dataset.entries[1].raw_data.basename)
    cache = fill(dataset, local, validate_hash="sha1")
    dataset.assert_intact(local)
    assert cache.stats.snapshot().shards_downloaded == 1


def test_without_validate_hash_a_cached_shard_is_not_read_again(
    make_dataset: Callable[..., Any], local: Path
) -> None:
    dataset = make_dataset(hashes=("sha1",))
    fill(dataset, local)
    flip_a_bit(local / dataset.entries[1].raw_data.basename)
    cache = fill(dataset, local)
    assert cache.stats.snapshot().shards_downloaded == 0


def test_validate_hash_refuses_a_corrupt_shard_of_a_local_only_stream(
    make_dataset: Callable[..., Any],
) -> None:
    dataset = make_dataset(hashes=("sha1",))
    flip_a_bit(dataset.remote / dataset.entries[2].raw_data.basename)
    cache = ShardCache(CacheConfig(local=str(dataset.remote), remote=None, validate_hash="sha1"))
    entries = cache.open_index()
    cache.ensure(entries[0])
    with pytest.raises(ShardIntegrityError, match=r"expected sha1 digest .*local-only stream .* holds a corrupt copy"):
        cache.ensure(entries[2])


def test_a_symlinked_sub_folder_leading_out_of_the_cache_is_refused(
    make_dataset: Callable[..., Any], local: Path, tmp_path: Path
) -> None:
    dataset = make_dataset(prefix="part/")
    outside = tmp_path / "outside"
    outside.mkdir()
    local.mkdir()
    (local / "part").symlink_to(outside)
    cache = ShardCache(CacheConfig(local=str(local), remote=str(dataset.remote)))
    with pytest.raises(UnsafePathError, match=r"part: expected a sub-folder inside the cache folder .* through a symlink"):
        cache.open_index()
    assert list(outside.iterdir()) == []


def test_a_cached_shard_evicted_while_it_is_verified_is_fetched_again(
    make_dataset: Callable[..., Any], local: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process's eviction (cache_limit) can remove a shard between "is it here?" and its hash check.
    dataset = make_dataset(hashes=("sha1",))
    fill(dataset, local)
    cache = ShardCache(CacheConfig(local=str(local), remote=str(dataset.remote), validate_hash="sha1"))
    entry = cache.open_index()[1]
    (local / entry.raw_data.basename).unlink()  # evicted after the presence check below said "here"
    seen_present = iter([True])
    real_is_present = cache._is_present
    monkeypatch.setattr(cache, "_is_present", lambda e: next(seen_present, None) or real_is_present(e))
    cache.ensure(entry)
    dataset.assert_intact(local, [entry])
    assert cache.stats.snapshot().shards_downloaded == 1
