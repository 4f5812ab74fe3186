"""CacheStats: per-process counters, mirrored to per-process files and summed per node."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from pathlib import Path

from stream_plugin.cache import CacheConfig, CacheStats, ShardCache, StatsSnapshot, node_stats
from stream_plugin.cache.stats import stats_folder

SPAWN = multiprocessing.get_context("spawn")


def _record(local: str, downloads: int, hold: object | None, recorded: object | None) -> None:
    stats = CacheStats(stats_folder(local))
    for _ in range(downloads):
        stats.record_download(100)
    stats.record_hit()
    stats.flush()
    if recorded is not None:
        recorded.set()  # type: ignore[attr-defined]
    if hold is not None:
        hold.wait(60)  # type: ignore[attr-defined]


def _run(local: Path, downloads: int) -> None:
    process = SPAWN.Process(target=_record, args=(str(local), downloads, None, None))
    process.start()
    process.join(60)
    assert process.exitcode == 0


def test_counters_of_one_process_add_up() -> None:
    stats = CacheStats()
    stats.record_download(10)
    stats.record_download(5)
    stats.record_retry()
    stats.record_hit()
    stats.record_eviction(7)
    assert stats.snapshot() == StatsSnapshot(
        shards_downloaded=2, bytes_downloaded=15, retries=1, hits=1, shards_evicted=1, bytes_evicted=7
    )


def test_snapshots_add_and_round_trip_through_dicts() -> None:
    one = StatsSnapshot(shards_downloaded=1, hits=2)
    assert one + one == StatsSnapshot(shards_downloaded=2, hits=4)
    assert StatsSnapshot.from_dict({**one.to_dict(), "future_counter": 3}) == one


def test_node_stats_sum_every_process_that_used_the_folder(tmp_path: Path) -> None:
    for downloads in (1, 2):
        _run(tmp_path, downloads)
    mine = CacheStats(stats_folder(tmp_path))
    mine.record_download(1)
    assert node_stats(tmp_path) == StatsSnapshot(shards_downloaded=4, bytes_downloaded=301, hits=2)


def test_exited_processes_are_folded_into_one_file_without_losing_counts(tmp_path: Path) -> None:
    for downloads in (1, 2):
        _run(tmp_path, downloads)
    CacheStats(stats_folder(tmp_path)).record_retry()  # registering folds the two exited processes
    files = sorted(path.name for path in stats_folder(tmp_path).iterdir() if path.suffix == ".json")
    assert len(files) == 2 and "retired.json" in files
    assert node_stats(tmp_path) == StatsSnapshot(shards_downloaded=3, bytes_downloaded=300, hits=2, retries=1)


def test_a_killed_process_keeps_its_last_counts_and_is_folded_later(tmp_path: Path) -> None:
    hold, recorded = SPAWN.Event(), SPAWN.Event()
    process = SPAWN.Process(target=_record, args=(str(tmp_path), 4, hold, recorded))
    process.start()
    assert recorded.wait(60)
    live = CacheStats(stats_folder(tmp_path))
    live.record_download(1)  # registers while the other is alive: nothing folded
    assert not (stats_folder(tmp_path) / "retired.json").exists()
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    CacheStats(stats_folder(tmp_path)).record_hit()
    CacheStats(stats_folder(tmp_path)).flush()
    retired = json.loads((stats_folder(tmp_path) / "retired.json").read_text())
    assert retired["totals"]["shards_downloaded"] == 4
    assert node_stats(tmp_path).shards_downloaded == 5


def test_hits_are_mirrored_on_flush(tmp_path: Path) -> None:
    stats = CacheStats(stats_folder(tmp_path))
    stats.record_download(1)
    for _ in range(5):
        stats.record_hit()
    stats.flush()
    assert node_stats(tmp_path).hits == 5


def test_forked_child_counts_from_zero_in_its_own_file(tmp_path: Path) -> None:
    stats = CacheStats(stats_folder(tmp_path))
    stats.record_download(10)
    process = multiprocessing.get_context("fork").Process(target=stats.record_download, args=(1,))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert stats.snapshot().shards_downloaded == 1
    assert node_stats(tmp_path) == StatsSnapshot(shards_downloaded=2, bytes_downloaded=11)


def test_node_stats_of_an_unused_folder_are_zero(tmp_path: Path) -> None:
    assert node_stats(tmp_path) == StatsSnapshot()


def test_cache_mirrors_node_stats_even_when_given_process_only_stats(make_dataset, tmp_path: Path) -> None:
    dataset = make_dataset(shards=2)
    shared = CacheStats()  # one object for several streams, as a dataset may pass it
    cache = ShardCache(CacheConfig(local=str(tmp_path / "local"), remote=str(dataset.remote)), stats=shared)
    for entry in dataset.entries:
        cache.ensure(entry)
    assert shared.snapshot().shards_downloaded == 2
    assert node_stats(tmp_path / "local").shards_downloaded == 2
