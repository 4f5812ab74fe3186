"""ShardCache in one process over a local-folder "remote": placement, verification, reuse, guards."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.fault_proxy import FaultRule

from stream_plugin.cache import CacheConfig, ShardCache
from stream_plugin.cache.locks import ControlFolder, try_locked
from stream_plugin.errors import ConfigError, IndexFormatError, ShardIntegrityError, UnsafePathError
from stream_plugin.format.index import parse_shard_entry
from stream_plugin.storage import LocalStore, RemoteNotFoundError


def _cache(local: Path, remote: Path | None, store: object = None, **options: object) -> ShardCache:
    config = CacheConfig(local=str(local), remote=str(remote) if remote is not None else None, **options)  # type: ignore[arg-type]
    return ShardCache(config, store)  # type: ignore[arg-type]


def test_ensure_places_raw_shard_under_its_basename(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=2)
    cache = _cache(local, dataset.remote)
    for entry in dataset.entries:
        assert cache.ensure(entry) == local
    dataset.assert_intact(local)
    stats = cache.stats.snapshot()
    assert stats.shards_downloaded == 2
    assert stats.bytes_downloaded == sum(len(data) for data in dataset.contents.values())


def test_second_ensure_is_a_hit_without_download(make_dataset, local: Path, counting_store) -> None:
    dataset = make_dataset(shards=1)
    store = counting_store(dataset.remote)
    cache = _cache(local, dataset.remote, store)
    cache.ensure(dataset.entries[0])
    cache.ensure(dataset.entries[0])
    assert store.downloads == {"shard.00000.mds": 1}
    assert cache.stats.snapshot().hits == 1


def test_compressed_shard_is_decompressed_and_zip_dropped(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=2, compression="zstd")
    cache = _cache(local, dataset.remote)
    for entry in dataset.entries:
        cache.ensure(entry)
    dataset.assert_intact(local)
    assert not list(local.glob("*.zstd"))
    assert cache.stats.snapshot().bytes_downloaded == sum(e.zip_data.bytes for e in dataset.entries)


def test_keep_zip_keeps_the_compressed_file(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=1, compression="gz")
    cache = _cache(local, dataset.remote, keep_zip=True)
    cache.ensure(dataset.entries[0])
    assert (local / "shard.00000.mds.gz").read_bytes() == (dataset.remote / "shard.00000.mds.gz").read_bytes()
    dataset.assert_intact(local)


def test_kept_zip_is_decompressed_again_without_download(make_dataset, local: Path, counting_store) -> None:
    dataset = make_dataset(shards=1, compression="zstd")
    store = counting_store(dataset.remote)
    cache = _cache(local, dataset.remote, store, keep_zip=True)
    cache.ensure(dataset.entries[0])
    (local / "shard.00000.mds").unlink()
    cache.ensure(dataset.entries[0])
    assert store.downloads == {"shard.00000.mds.zstd": 1}
    dataset.assert_intact(local)


def test_sub_folder_basenames_are_placed_in_sub_folders(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=2, prefix="3/", compression="zstd")
    cache = _cache(local, dataset.remote)
    for entry in dataset.entries:
        cache.ensure(entry)
    assert (local / "3" / "shard.00001.mds").is_file()
    dataset.assert_intact(local)


def test_shard_with_meta_file_is_present_only_when_both_raw_files_are(
    make_dataset, local: Path, counting_store
) -> None:
    dataset = make_dataset(shards=1, shard_format="json", compression="zstd")
    store = counting_store(dataset.remote)
    cache = _cache(local, dataset.remote, store)
    cache.ensure(dataset.entries[0])
    (local / "shard.00000.json.meta").unlink()
    cache.ensure(dataset.entries[0])
    assert store.downloads["shard.00000.json.meta.zstd"] == 2
    dataset.assert_intact(local)


def test_truncated_local_file_is_downloaded_again(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=1)
    cache = _cache(local, dataset.remote)
    local.mkdir(exist_ok=True)
    (local / "shard.00000.mds").write_bytes(b"partial")
    cache.ensure(dataset.entries[0])
    dataset.assert_intact(local)


def test_fetch_index_downloads_once_and_reuses_the_local_copy(
    make_dataset, local: Path, counting_store
) -> None:
    dataset = make_dataset(shards=3)
    store = counting_store(dataset.remote)
    cache = _cache(local, dataset.remote, store)
    assert cache.fetch_index() == local / "index.json"
    assert _cache(local, dataset.remote, store).open_index() == dataset.entries
    assert store.downloads == {"index.json": 1}


def test_fetch_index_refuses_to_publish_an_invalid_index(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=1)
    (dataset.remote / "index.json").write_text('{"version": 1, "shards": []}')
    with pytest.raises(IndexFormatError, match="expected index version 2"):
        _cache(local, dataset.remote).fetch_index()
    assert not (local / "index.json").exists()
    assert not list(local.glob(".index.json.tmp*"))


def test_missing_remote_index_fails_fast(tmp_path: Path, local: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(RemoteNotFoundError):
        _cache(local, tmp_path / "empty").fetch_index()


def test_size_mismatch_is_downloaded_again_then_fails_naming_the_shard(
    make_dataset, local: Path, counting_store
) -> None:
    dataset = make_dataset(shards=1)
    (dataset.remote / "shard.00000.mds").write_bytes(b"not what the index says")
    store = counting_store(dataset.remote)
    cache = _cache(local, dataset.remote, store, download_retry=2)
    size = dataset.entries[0].raw_data.bytes
    with pytest.raises(
        ShardIntegrityError, match=rf"shard 'shard.00000.mds'.*expected {size} bytes.*found 23"
    ):
        cache.ensure(dataset.entries[0])
    assert store.downloads["shard.00000.mds"] == 3
    assert cache.stats.snapshot().retries == 2
    assert not list(local.iterdir()) or not (local / "shard.00000.mds").exists()
    assert not list(local.glob(".shard*"))


def test_digest_mismatch_with_validate_hash_is_refused(make_dataset, local: Path, corrupting_store) -> None:
    dataset = make_dataset(shards=1, compression="zstd")
    store = corrupting_store(dataset.remote, bad_downloads=10)
    cache = _cache(local, dataset.remote, store, validate_hash="sha1", download_retry=1)
    with pytest.raises(ShardIntegrityError, match=r"expected sha1 digest .* found "):
        cache.ensure(dataset.entries[0])
    assert store.downloads["shard.00000.mds.zstd"] == 2


def test_one_corrupt_download_is_retried_and_succeeds(make_dataset, local: Path, corrupting_store) -> None:
    dataset = make_dataset(shards=1)
    store = corrupting_store(dataset.remote, bad_downloads=1)
    cache = _cache(local, dataset.remote, store, validate_hash="sha1")
    cache.ensure(dataset.entries[0])
    dataset.assert_intact(local)
    assert cache.stats.snapshot().retries == 1
    assert cache.stats.snapshot().shards_downloaded == 1


def test_corrupt_compressed_bytes_are_retried_without_validate_hash(
    make_dataset, local: Path, corrupting_store
) -> None:
    dataset = make_dataset(shards=1, compression="zstd")
    store = corrupting_store(dataset.remote, bad_downloads=1)
    cache = _cache(local, dataset.remote, store)
    cache.ensure(dataset.entries[0])
    dataset.assert_intact(local)
    assert cache.stats.snapshot().retries == 1


def test_validate_hash_missing_from_index_is_a_config_error(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=1, hashes=())
    cache = _cache(local, dataset.remote, validate_hash="sha1")
    with pytest.raises(ConfigError, match=r"expected index.json to record digests for \['sha1'\]"):
        cache.ensure(dataset.entries[0])


def test_unknown_validate_hash_is_refused_at_construction(local: Path) -> None:
    with pytest.raises(ConfigError, match="validate_hash: expected one of"):
        CacheConfig(local=str(local), remote=None, validate_hash="crc99")


def test_cache_limit_accepts_unit_strings(local: Path) -> None:
    assert CacheConfig(local=str(local), remote="s3://b/x", cache_limit="2kb").limit == 2048
    with pytest.raises(ConfigError, match="cache_limit"):
        CacheConfig(local=str(local), remote="s3://b/x", cache_limit="lots")


def test_second_cache_on_the_same_folder_reuses_shards_without_clean_up(
    make_dataset, local: Path, counting_store
) -> None:
    dataset = make_dataset(shards=2)
    store = counting_store(dataset.remote)
    for _ in range(2):
        cache = _cache(local, dataset.remote, store)
        for entry in cache.open_index():
            cache.ensure(entry)
    assert set(store.downloads.values()) == {1}


def test_a_second_remote_on_the_same_local_folder_is_refused(make_dataset, local: Path) -> None:
    first, second = make_dataset(shards=1), make_dataset(shards=1, seed=1)
    _cache(local, first.remote)
    with pytest.raises(ConfigError, match=r"already caches .*remote-0.*Use a different local folder"):
        _cache(local, second.remote)


def test_remote_equal_to_local_is_refused(make_dataset) -> None:
    dataset = make_dataset(shards=1)
    with pytest.raises(ConfigError, match="pass remote=None to read a local dataset in place"):
        _cache(dataset.remote, dataset.remote)


def test_basename_inside_the_control_folder_is_refused(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=1)
    config = dict(dataset.entries[0].config)
    config["raw_data"] = {"basename": ".stream_plugin/remote", "bytes": 3, "hashes": {}}
    entry = parse_shard_entry(config, source="index.json")
    with pytest.raises(UnsafePathError, match="control folder"):
        _cache(local, dataset.remote).ensure(entry)


def test_temporaries_of_a_dead_download_are_removed_by_the_next(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=1, compression="zstd")
    local.mkdir(exist_ok=True)
    leftovers = [local / ".shard.00000.mds.zstd.tmp-locked", local / ".shard.00000.mds.tmp-locked"]
    for path in leftovers:
        path.write_bytes(b"junk")
    _cache(local, dataset.remote).ensure(dataset.entries[0])
    assert not any(path.exists() for path in leftovers)
    dataset.assert_intact(local)


def test_reading_holds_a_shared_lock_that_blocks_eviction(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=1)
    cache = _cache(local, dataset.remote, cache_limit=10**9)  # only a limit can evict
    lock = ControlFolder(local).use_lock("shard.00000.mds")
    with cache.reading(dataset.entries[0]) as folder:
        assert (folder / "shard.00000.mds").is_file()
        with try_locked(lock) as acquired:
            assert not acquired
    with try_locked(lock) as acquired:
        assert acquired


def test_local_only_compressed_shard_is_decompressed_in_place_and_zip_kept(make_dataset) -> None:
    dataset = make_dataset(shards=2, compression="zstd")
    cache = _cache(dataset.remote, None)
    for entry in cache.open_index():
        cache.ensure(entry)
    assert (dataset.remote / "shard.00001.mds.zstd").is_file()
    dataset.assert_intact(dataset.remote)


def test_local_only_stream_with_raw_files_writes_nothing(make_dataset) -> None:
    dataset = make_dataset(shards=2)
    before = sorted(os.listdir(dataset.remote))
    cache = _cache(dataset.remote, None)
    with cache.reading(dataset.entries[1]) as folder:
        assert folder == dataset.remote
    assert sorted(os.listdir(dataset.remote)) == before


def test_local_only_missing_shard_names_the_file_and_the_fix(make_dataset) -> None:
    dataset = make_dataset(shards=1)
    (dataset.remote / "shard.00000.mds").unlink()
    with pytest.raises(
        RemoteNotFoundError, match=r"shard.00000.mds: expected the shard file .* pass remote="
    ):
        _cache(dataset.remote, None).ensure(dataset.entries[0])


def test_local_only_stream_refuses_a_store(make_dataset) -> None:
    dataset = make_dataset(shards=1)
    with pytest.raises(ConfigError, match="local-only"):
        _cache(dataset.remote, None, LocalStore(dataset.remote))


def test_transient_remote_faults_are_retried_and_counted(
    make_dataset, remote, upload_remote, remote_proxy, local: Path
) -> None:
    dataset = make_dataset(shards=3, compression="zstd")
    url = upload_remote(dataset)
    remote_proxy.set_rules(
        *(
            FaultRule(fault, path_contains=f"shard.{number:05d}", limit=1)
            for number, fault in enumerate(remote.download_faults)
        )
    )
    cache = ShardCache(CacheConfig(local=str(local), remote=url, download_retry=2, validate_hash="sha1"))
    for entry in cache.open_index():
        cache.ensure(entry)
    dataset.assert_intact(local)
    assert sum(remote_proxy.injected.values()) == len(remote.download_faults)
    assert cache.stats.snapshot().retries == len(remote.download_faults)
    assert cache.stats.snapshot().shards_downloaded == 3


def test_missing_remote_object_fails_fast_without_retries(
    make_dataset, upload_remote, remote_proxy, local: Path
) -> None:
    dataset = make_dataset(shards=1)
    url = upload_remote(dataset)
    cache = ShardCache(CacheConfig(local=str(local), remote=url + "-elsewhere"))
    with pytest.raises(RemoteNotFoundError):
        cache.fetch_index()
    # One request: the HEAD that asks for the index's identity (taken before its download) finds nothing.
    assert remote_proxy.requests["get"] + remote_proxy.requests["head"] == 1
    assert cache.stats.snapshot().retries == 0


def test_threads_asking_for_one_shard_share_a_single_download(make_dataset, local: Path, slow_store) -> None:
    dataset = make_dataset(shards=1)
    store = slow_store(dataset.remote, 0.2)
    cache = _cache(local, dataset.remote, store)
    with ThreadPoolExecutor(4) as pool:
        folders = list(pool.map(lambda _: cache.ensure(dataset.entries[0]), range(4)))
    assert folders == [local] * 4
    assert store.downloads == {"shard.00000.mds": 1}
    assert cache.stats.snapshot().hits == 3


def test_a_download_never_waits_behind_a_reader_of_the_same_process(make_dataset, local: Path) -> None:
    # A thread that starts waiting for a shard while another thread reads it must not block on the
    # reader's lock: one lock file for both once deadlocked a prefetch pool against its own reader.
    import threading

    dataset = make_dataset(shards=1)
    cache = _cache(local, dataset.remote, cache_limit=10**9)
    download_lock = ControlFolder(local).shard_lock("shard.00000.mds")
    with cache.reading(dataset.entries[0]):
        with try_locked(download_lock) as acquired:
            assert acquired  # reading holds no download lock
        waiter = threading.Thread(target=cache.ensure, args=(dataset.entries[0],))
        waiter.start()
        waiter.join(timeout=10)
        assert not waiter.is_alive()


def test_reading_without_a_limit_takes_no_lock(make_dataset, local: Path) -> None:
    # Nothing can evict without cache_limit, so an open reader costs no lock and no descriptor.
    dataset = make_dataset(shards=1)
    cache = _cache(local, dataset.remote)
    with (
        cache.reading(dataset.entries[0]),
        try_locked(ControlFolder(local).use_lock("shard.00000.mds")) as free,
    ):
        assert free
