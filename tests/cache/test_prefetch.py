"""Prefetcher: background downloads of a worker's upcoming shards, in order, within the window."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from stream_plugin.cache import CacheConfig, ShardCache
from stream_plugin.cache.prefetch import Prefetcher
from stream_plugin.errors import ConfigError
from stream_plugin.storage import RemoteNotFoundError

HOLD = 30.0  # bounds a wait that only a broken prefetcher would reach; the tests never wait for it


def _setup(make_dataset, local: Path, store_factory, *store_args, shards: int = 6):
    dataset = make_dataset(shards=shards, shard_bytes=500)
    store = store_factory(dataset.remote, *store_args)
    cache = ShardCache(CacheConfig(local=str(local), remote=str(dataset.remote)), store)
    return dataset, store, cache


def _names(ids: list[int]) -> set[str]:
    return {f"shard.{i:05d}.mds" for i in ids}


def test_every_position_gets_its_shard_and_each_shard_is_downloaded_once(
    make_dataset, local: Path, counting_store
) -> None:
    dataset, store, cache = _setup(make_dataset, local, counting_store)
    upcoming = np.array([3, 3, 0, 5, 0, 1, 1, 2, 4, 3])
    with Prefetcher.for_cache(cache, dataset.entries, upcoming, predownload=4) as prefetcher:
        for position, shard in enumerate(upcoming):
            folder = prefetcher.wait(position)
            dataset.assert_intact(folder, [dataset.entries[shard]])
    assert store.downloads == dict.fromkeys(_names(list(range(6))), 1)


def test_downloads_stay_within_predownload_samples_ahead(make_dataset, local: Path, counting_store) -> None:
    dataset, store, cache = _setup(make_dataset, local, counting_store)
    with Prefetcher.for_cache(cache, dataset.entries, np.arange(6), predownload=2) as prefetcher:
        prefetcher.wait(0)
        prefetcher.wait(1)  # schedules samples 1 and 2, nothing further
        time.sleep(0.05)  # let the pool run whatever it was given
        assert set(store.downloads) <= _names([0, 1, 2])


def test_single_thread_downloads_shards_in_the_order_they_are_needed(
    make_dataset, local: Path, counting_store
) -> None:
    dataset, store, cache = _setup(make_dataset, local, counting_store)
    upcoming = np.array([4, 4, 1, 5, 0, 2, 3])
    with Prefetcher.for_cache(cache, dataset.entries, upcoming, predownload=7, max_threads=1) as prefetcher:
        prefetcher.wait(0)  # schedules the whole window
        prefetcher.wait(len(upcoming) - 1)
    assert list(store.downloads) == [f"shard.{i:05d}.mds" for i in (4, 1, 5, 0, 2, 3)]


def test_downloads_overlap_with_each_other_and_with_iteration() -> None:
    # Shard 0 is ready at once; the downloads of shards 1.. each hold until the test's training step
    # releases them. Four in flight at once, while the step runs, is only reachable if the downloads
    # overlap with each other and with iteration: one at a time, or before wait(0) returns, never gets
    # there (the semaphore times out).
    started = threading.Semaphore(0)
    release = threading.Event()

    def prepare(shard: int) -> Path:
        if shard:
            started.release()
            assert release.wait(HOLD), f"shard {shard}'s download was never released"
        return Path(".")

    with Prefetcher(prepare, 8, np.arange(8), predownload=8, max_threads=4) as prefetcher:
        prefetcher.wait(0)
        # The training step of sample 0: shards 1 to 4 download meanwhile (shard 0's thread took 4).
        assert all(started.acquire(timeout=HOLD) for _ in range(4)), "fewer than 4 downloads at once"
        release.set()
        for position in range(1, 8):
            prefetcher.wait(position)


def test_background_error_is_raised_by_wait_of_the_sample_that_needs_it(
    make_dataset, local: Path, counting_store
) -> None:
    dataset, store, cache = _setup(make_dataset, local, counting_store)
    (dataset.remote / "shard.00002.mds").unlink()
    with Prefetcher.for_cache(cache, dataset.entries, np.arange(6), predownload=6) as prefetcher:
        prefetcher.wait(0)
        prefetcher.wait(1)
        with pytest.raises(RemoteNotFoundError, match="shard.00002.mds"):
            prefetcher.wait(2)
        prefetcher.wait(3)


def test_close_returns_promptly_and_cancels_pending_downloads() -> None:
    # One thread; shard 1's download holds until the test releases it, after close.
    started: list[int] = []
    finished: list[int] = []
    in_flight = threading.Event()
    release = threading.Event()

    def prepare(shard: int) -> Path:
        started.append(shard)
        if shard:
            in_flight.set()
            release.wait(HOLD)
        finished.append(shard)
        return Path(".")

    prefetcher = Prefetcher(prepare, 6, np.arange(6), predownload=6, max_threads=1)
    prefetcher.wait(0)
    assert in_flight.wait(HOLD)
    prefetcher.close()
    assert finished == [0], "close waited for the download in flight"
    release.set()
    for thread in threading.enumerate():  # the pool's thread ends once the held download finishes
        if thread.name.startswith("stream_plugin-prefetch"):
            thread.join(HOLD)
            assert not thread.is_alive()
    assert started == [0, 1], "a download queued before close started after it"
    with pytest.raises(ConfigError, match="closed"):
        prefetcher.wait(1)


def test_moving_backwards_schedules_the_window_again(make_dataset, local: Path, counting_store) -> None:
    dataset, store, cache = _setup(make_dataset, local, counting_store)
    with Prefetcher.for_cache(cache, dataset.entries, np.arange(6), predownload=1) as prefetcher:
        prefetcher.wait(4)
        (local / "shard.00004.mds").unlink()
        assert prefetcher.wait(1) == local
        assert prefetcher.wait(4) == local
    assert store.downloads["shard.00001.mds"] == 1


@pytest.mark.parametrize(
    ("upcoming", "predownload", "message"),
    [
        (np.array([0, 9]), 1, r"expected shard ids in \[0, 6\), found values from 0 to 9"),
        (np.array([[0]]), 1, "expected a 1-D integer array"),
        (np.array([0]), -1, "predownload: expected a number of samples >= 0"),
    ],
)
def test_invalid_arguments_are_refused(
    make_dataset, local: Path, counting_store, upcoming, predownload, message
):
    dataset, _, cache = _setup(make_dataset, local, counting_store)
    with pytest.raises(ConfigError, match=message):
        Prefetcher.for_cache(cache, dataset.entries, upcoming, predownload=predownload)


def test_more_is_asked_once_when_the_window_reaches_past_the_upcoming_shards() -> None:
    prepared: list[int] = []
    asked: list[bool] = []

    def more() -> np.ndarray:
        asked.append(True)
        return np.array([3, 4], np.int64)

    def prepare(shard: int) -> Path:
        prepared.append(shard)
        return Path(".")

    with Prefetcher(prepare, 5, np.array([0, 1, 2]), predownload=2, max_threads=1, more=more) as prefetcher:
        prefetcher.wait(0)
        assert asked == []  # the window [0, 2) is inside the upcoming shards
        prefetcher.wait(2)  # the window [2, 4) reaches past them: the next shards are scheduled too
        prefetcher.wait(3)
        prefetcher.advance(4)
        prefetcher.wait(4)
        assert asked == [True]
    assert sorted(prepared) == [0, 1, 2, 3, 4]


def test_a_download_ahead_that_waited_is_tried_again_when_the_window_moves(tmp_path: Path) -> None:
    attempts: dict[int, int] = {}
    deferred = threading.Event()
    demanded: list[int] = []

    def ahead(shard: int) -> Path | None:
        attempts[shard] = attempts.get(shard, 0) + 1
        if shard == 2 and attempts[shard] == 1:
            deferred.set()
            return None  # the cache would rather wait
        return tmp_path

    def on_demand(shard: int) -> Path:
        demanded.append(shard)
        return tmp_path

    moves: list[int] = []
    upcoming = np.array([0, 1, 2, 3])
    with Prefetcher(
        on_demand, 4, upcoming, predownload=4, prepare_ahead=ahead, on_advance=moves.append
    ) as prefetcher:
        prefetcher.wait(0)
        assert deferred.wait(5)
        prefetcher.advance(1)
        for position in range(1, 4):
            assert prefetcher.wait(position) == tmp_path
    assert attempts[2] == 2
    assert demanded == []
    assert moves[:2] == [0, 1]


def test_wait_fetches_on_demand_a_shard_whose_download_ahead_waited(tmp_path: Path) -> None:
    demanded: list[int] = []

    def on_demand(shard: int) -> Path:
        demanded.append(shard)
        return tmp_path

    with Prefetcher(on_demand, 2, np.array([0, 1]), predownload=2, prepare_ahead=lambda shard: None) as prefetcher:
        assert prefetcher.wait(1) == tmp_path
    assert demanded == [1]
