"""cache_limit: least-recently-used shards nobody reads are evicted; usage never exceeds the limit."""

from __future__ import annotations

import multiprocessing
import random
import threading
from pathlib import Path

import pytest

from stream_plugin.cache import CacheConfig, ShardCache, cache_limit_floor, node_stats
from stream_plugin.cache.eviction import bytes_present
from stream_plugin.cache.locks import ControlFolder, locked
from stream_plugin.errors import ConfigError

SPAWN = multiprocessing.get_context("spawn")


def _cache(local: Path, remote: Path | None, **options: object) -> ShardCache:
    config = CacheConfig(local=str(local), remote=str(remote) if remote else None, **options)  # type: ignore[arg-type]
    cache = ShardCache(config)
    cache.open_index()
    return cache


def _largest(dataset) -> int:
    return max(entry.raw_data.bytes for entry in dataset.entries)


def _present(local: Path, dataset, index: int) -> bool:
    return (local / dataset.entries[index].raw_data.basename).is_file()


def test_dataset_three_times_the_limit_read_twice_stays_within_the_limit(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=9, compression="zstd")
    limit = 3 * _largest(dataset)
    cache = _cache(local, dataset.remote, cache_limit=limit)
    for _ in range(2):
        for entry in dataset.entries:
            with cache.reading(entry) as folder:
                assert dataset.cached_bytes(local) <= limit
                dataset.assert_intact(folder, [entry])
    stats = cache.stats.snapshot()
    assert stats.shards_downloaded == 18  # a cyclic scan larger than the cache misses every time under LRU
    assert stats.bytes_evicted == sum(e.raw_data.bytes for e in dataset.entries) * 2 - dataset.cached_bytes(
        local
    )


def test_least_recently_read_shard_is_evicted_first(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = _cache(local, dataset.remote, cache_limit=2 * _largest(dataset))
    for index in (0, 1, 0):
        with cache.reading(dataset.entries[index]):
            pass
    cache.ensure(dataset.entries[2])
    assert [_present(local, dataset, i) for i in range(3)] == [True, False, True]


def test_shard_being_read_is_skipped_by_eviction(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = _cache(local, dataset.remote, cache_limit=2 * _largest(dataset))
    cache.ensure(dataset.entries[1])
    with cache.reading(dataset.entries[0]):  # older than shard 1 by now, but busy
        cache.ensure(dataset.entries[1])
        cache.ensure(dataset.entries[2])
        assert [_present(local, dataset, i) for i in range(3)] == [True, False, True]


def _hold_reading(local: str, remote: str, limit: int, held: object, release: object) -> None:
    cache = ShardCache(CacheConfig(local=local, remote=remote, cache_limit=limit))
    entries = cache.open_index()
    with cache.reading(entries[0]):
        held.set()  # type: ignore[attr-defined]
        release.wait(60)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_shard_read_by_another_process_is_never_evicted(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    limit = 2 * _largest(dataset)
    held, release = SPAWN.Event(), SPAWN.Event()
    args = (str(local), str(dataset.remote), limit, held, release)
    reader = SPAWN.Process(target=_hold_reading, args=args)
    reader.start()
    try:
        assert held.wait(60)
        cache = _cache(local, dataset.remote, cache_limit=limit)
        cache.ensure(dataset.entries[1])
        cache.ensure(dataset.entries[2])
        assert _present(local, dataset, 0)
        dataset.assert_intact(local, [dataset.entries[0]])
    finally:
        release.set()
        reader.join(60)
    assert reader.exitcode == 0


def test_no_room_while_every_shard_is_read_names_the_fix(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = _cache(local, dataset.remote, cache_limit=2 * _largest(dataset))
    message = r"expected room for shard 'shard.00002.mds'.*raise cache_limit"
    with (
        cache.reading(dataset.entries[0]),
        cache.reading(dataset.entries[1]),
        pytest.raises(ConfigError, match=message),
    ):
        cache.ensure(dataset.entries[2])
    assert not _present(local, dataset, 2)


def test_evict_to_limit_trims_a_cache_filled_without_a_limit(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=4, shard_bytes=1000)
    unlimited = _cache(local, dataset.remote)
    for entry in dataset.entries:
        unlimited.ensure(entry)
    limit = 2 * _largest(dataset)
    cache = _cache(local, dataset.remote, cache_limit=limit)
    freed = cache.evict_to_limit()
    assert freed > 0
    assert dataset.cached_bytes(local) <= limit
    assert cache.stats.snapshot().bytes_evicted == freed
    assert node_stats(local).bytes_evicted == freed


def test_kept_zip_counts_towards_the_limit(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=4, compression="zstd")
    entry_bytes = max(e.raw_data.bytes + e.zip_data.bytes for e in dataset.entries)
    cache = _cache(local, dataset.remote, cache_limit=2 * entry_bytes, keep_zip=True)
    for entry in dataset.entries:
        cache.ensure(entry)
        assert dataset.cached_bytes(local) <= 2 * entry_bytes
    assert cache.stats.snapshot().shards_evicted == 2


def test_local_only_stream_is_never_evicted(make_dataset) -> None:
    dataset = make_dataset(shards=4, compression="zstd")
    cache = _cache(dataset.remote, None, cache_limit=1)
    for entry in dataset.entries:
        cache.ensure(entry)
    assert cache.evict_to_limit() == 0
    dataset.assert_intact(dataset.remote)
    assert len(list(dataset.remote.glob("*.zstd"))) == 4


def test_cache_limit_floor_holds_the_largest_shards_of_every_reader() -> None:
    assert cache_limit_floor([5, 1, 3, 2], readers=1) == 8
    assert cache_limit_floor([5, 1, 3, 2], readers=2) == 11
    assert cache_limit_floor([5, 1, 3, 2], readers=1, shards_per_reader=1) == 5
    with pytest.raises(ConfigError, match="expected readers >= 1"):
        cache_limit_floor([1], readers=0)



def test_minimum_cache_limit_is_a_deprecated_alias_of_cache_limit_floor() -> None:
    from stream_plugin.cache import minimum_cache_limit

    with pytest.warns(DeprecationWarning, match=r"minimum_cache_limit is deprecated.*call cache_limit_floor"):
        assert minimum_cache_limit([5, 1, 3, 2], readers=2) == cache_limit_floor([5, 1, 3, 2], readers=2) == 11

def test_too_small_limit_is_refused_at_start_up_naming_the_smallest_value(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=4)
    smallest = cache_limit_floor([e.raw_data.bytes for e in dataset.entries], readers=2)
    cache = _cache(local, dataset.remote, cache_limit=smallest - 1)
    with pytest.raises(
        ConfigError, match=rf"expected at least {smallest} bytes .* raise cache_limit to {smallest}"
    ):
        cache.check_working_set(readers=2)
    _cache(local, dataset.remote, cache_limit=smallest).check_working_set(readers=2)


def _read_under_limit(local: str, remote: str, limit: int, seed: int) -> None:
    cache = ShardCache(CacheConfig(local=local, remote=remote, cache_limit=limit))
    entries = cache.open_index()
    control = ControlFolder(Path(local))
    for entry in random.Random(seed).sample(entries, len(entries)):
        with cache.reading(entry) as folder:
            assert (folder / entry.raw_data.basename).stat().st_size == entry.raw_data.bytes
        # Nobody evicts or reserves under the eviction lock, so the scan sees a consistent bound.
        with locked(control.eviction_lock):
            usage = sum(bytes_present(Path(local), e) for e in entries)
        assert usage <= limit, f"usage {usage} > cache_limit {limit}"
    cache.close()


@pytest.mark.slow
def test_four_processes_under_a_limit_never_exceed_it(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=16, shard_bytes=1000, compression="zstd")
    readers = 4
    limit = cache_limit_floor([e.raw_data.bytes for e in dataset.entries], readers=readers)
    processes = [
        SPAWN.Process(target=_read_under_limit, args=(str(local), str(dataset.remote), limit, seed))
        for seed in range(readers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [process.exitcode for process in processes] == [0] * readers
    assert node_stats(local).shards_evicted > 0
    assert dataset.cached_bytes(local) <= limit


def test_cache_never_told_the_index_reads_it_to_count_shards_others_placed(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=4, shard_bytes=1000)
    filler = _cache(local, dataset.remote)  # fetches index.json and places every shard
    for entry in dataset.entries:
        filler.ensure(entry)
    limit = 2 * _largest(dataset)
    cache = ShardCache(CacheConfig(local=str(local), remote=str(dataset.remote), cache_limit=limit))
    cache.ensure(dataset.entries[0])  # a hit: nothing to place, nothing evicted
    cache.evict_to_limit()
    assert dataset.cached_bytes(local) <= limit


def test_shard_larger_than_the_limit_is_refused_naming_the_limit(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=1)
    cache = _cache(local, dataset.remote, cache_limit=100)
    with pytest.raises(ConfigError, match="the shard alone is larger than cache_limit=100"):
        cache.ensure(dataset.entries[0])
    assert not list(local.glob("shard*")) and not list(local.glob(".shard*"))


def test_a_placed_shard_whose_download_still_holds_its_reservation_counts_once(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=2, shard_bytes=1000)
    cache = _cache(local, dataset.remote, cache_limit=sum(e.raw_data.bytes for e in dataset.entries))
    for entry in dataset.entries:
        cache.ensure(entry)
    control = ControlFolder(local)
    placed = dataset.entries[1]
    name = placed.raw_data.basename
    with locked(control.shard_lock(name)):  # its download placed the files, not yet dropped the reservation
        control.reservation(name).parent.mkdir(parents=True, exist_ok=True)
        control.reservation(name).write_text(str(placed.raw_data.bytes))
        assert cache.evict_to_limit() == 0
    assert _present(local, dataset, 0) and _present(local, dataset, 1)


@pytest.mark.parametrize("eviction", ["lru", "belady"])
def test_a_download_ahead_with_every_shard_read_waits_instead_of_failing(
    make_dataset, local: Path, eviction: str
) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = _cache(local, dataset.remote, cache_limit=2 * _largest(dataset), eviction=eviction)
    with cache.reading(dataset.entries[0]), cache.reading(dataset.entries[1]):
        assert cache.ensure_ahead(dataset.entries[2]) is None  # fetched on demand later, not an error
        with pytest.raises(ConfigError, match="is being read"):
            cache.ensure(dataset.entries[2])  # on demand, the limit really is too small
    assert not _present(local, dataset, 2)


def test_a_download_on_demand_waits_for_a_placed_shard_whose_lock_is_still_held(
    make_dataset, local: Path
) -> None:
    """A download that has placed its shard and dropped its reservation still holds the shard's lock
    for a moment: another download needing room waits for it, then evicts it."""
    dataset = make_dataset(shards=3, shard_bytes=1000)
    cache = _cache(local, dataset.remote, cache_limit=2 * _largest(dataset))
    cache.ensure(dataset.entries[1])
    control = ControlFolder(local)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with locked(control.shard_lock(dataset.entries[1].raw_data.basename)):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    threading.Timer(0.2, release.set).start()
    with cache.reading(dataset.entries[0]):
        cache.ensure(dataset.entries[2])
    holder.join()
    assert [_present(local, dataset, i) for i in range(3)] == [True, False, True]


def test_a_shard_fetched_on_demand_is_pinned_before_a_download_ahead_can_evict_it(
    make_dataset, local: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a prefetch thread can win: between placing a shard on demand and reading it, a
    download ahead needing room evicts the least recently used idle shard, which was that one."""
    dataset = make_dataset(shards=2, shard_bytes=1000)
    cache = _cache(local, dataset.remote, cache_limit=_largest(dataset), eviction="lru")
    ensure = ShardCache.ensure
    raced: list[object] = []

    def ensure_then_race(self: ShardCache, entry):  # type: ignore[no-untyped-def]
        folder = ensure(self, entry)
        if entry is dataset.entries[0] and not raced:
            raced.append(self.ensure_ahead(dataset.entries[1]))  # a prefetch thread's turn
        return folder

    monkeypatch.setattr(ShardCache, "ensure", ensure_then_race)
    with cache.reading(dataset.entries[0]) as folder:
        dataset.assert_intact(folder, [dataset.entries[0]])
    assert raced == [None]  # the download ahead waited: the shard about to be read stays
    assert cache.stats.snapshot().shards_downloaded == 1
