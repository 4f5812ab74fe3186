"""Many real processes on one cold cache folder: each shard is downloaded exactly once per node."""

from __future__ import annotations

import multiprocessing
import random
from pathlib import Path

import pytest

from stream_plugin.cache import CacheConfig, ShardCache, node_stats
from stream_plugin.cache.locks import ControlFolder, is_locked_exclusively

SPAWN = multiprocessing.get_context("spawn")
PROCESSES = 8


def _ensure_all(local: str, remote: str, seed: int, start: object) -> None:
    cache = ShardCache(CacheConfig(local=local, remote=remote, validate_hash="sha1"))
    start.wait()  # type: ignore[attr-defined]  # all processes race for the index and the shards
    entries = cache.open_index()
    for entry in random.Random(seed).sample(entries, len(entries)):
        with cache.reading(entry) as folder:
            assert (folder / entry.raw_data.basename).stat().st_size == entry.raw_data.bytes
    cache.close()


def _run_all(local: Path, remote: Path | str, count: int = PROCESSES) -> None:
    start = SPAWN.Barrier(count)
    processes = [
        SPAWN.Process(target=_ensure_all, args=(str(local), str(remote), seed, start))
        for seed in range(count)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [process.exitcode for process in processes] == [0] * count


@pytest.mark.slow
def test_eight_processes_download_each_shard_exactly_once(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=8, compression="zstd")
    _run_all(local, dataset.remote)

    stats = node_stats(local)
    assert stats.shards_downloaded == len(dataset.entries)
    assert stats.bytes_downloaded == sum(entry.stored_data.bytes for entry in dataset.entries)
    assert stats.retries == 0
    assert stats.hits == (PROCESSES - 1) * len(dataset.entries)  # every request but the download
    dataset.assert_intact(local)
    control = ControlFolder(local)
    assert not any(is_locked_exclusively(control.shard_lock(e.raw_data.basename)) for e in dataset.entries)
    assert not list(local.glob(".*tmp*"))


@pytest.mark.slow
def test_a_second_run_on_the_same_folder_downloads_nothing(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=4)
    _run_all(local, dataset.remote, count=2)
    _run_all(local, dataset.remote, count=2)
    assert node_stats(local).shards_downloaded == len(dataset.entries)
    dataset.assert_intact(local)


@pytest.mark.slow
def test_processes_reading_from_a_remote_send_one_get_per_file_for_the_node(
    make_dataset, upload_remote, remote_proxy, local: Path
) -> None:
    dataset = make_dataset(shards=6, compression="zstd")
    url = upload_remote(dataset)
    remote_proxy.reset_counts()
    _run_all(local, url, count=4)
    assert remote_proxy.requests["get"] == len(dataset.entries) + 1  # index.json, then each shard once
    assert node_stats(local).shards_downloaded == len(dataset.entries)
    dataset.assert_intact(local)
