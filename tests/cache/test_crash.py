"""A process SIGKILLed mid-download leaves nothing that blocks or misleads the next one."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from stream_plugin.cache import CacheConfig, ShardCache, node_stats
from stream_plugin.cache.locks import ControlFolder, is_locked_exclusively
from stream_plugin.storage import LocalStore, open_store

SPAWN = multiprocessing.get_context("spawn")


class StallingStore(LocalStore):
    """Writes the first half of ``stall_key``, signals ``started``, then hangs until killed."""

    def __init__(self, url: str, stall_key: str, started: object) -> None:
        super().__init__(url)
        self.stall_key = stall_key
        self.started = started

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        if key != self.stall_key:
            return super().download(key, dest, timeout=timeout)
        data = self.path_of(key).read_bytes()
        with open(dest, "wb") as handle:
            handle.write(data[: len(data) // 2])
        self.started.set()  # type: ignore[attr-defined]
        time.sleep(600)
        raise AssertionError("killed before this")


def _stall(local: str, remote: str, stall_key: str, cache_limit: int | None, started: object) -> None:
    store = StallingStore(remote, stall_key, started)
    cache = ShardCache(CacheConfig(local=local, remote=remote, cache_limit=cache_limit), store)
    for entry in cache.open_index():
        cache.ensure(entry)


def _read_all(local: str, remote: str, cache_limit: int | None) -> None:
    cache = ShardCache(CacheConfig(local=local, remote=remote, cache_limit=cache_limit))
    for entry in cache.open_index():
        with cache.reading(entry):
            pass
    cache.close()


def _kill_mid_download(local: Path, remote: Path, stall_key: str, cache_limit: int | None = None) -> None:
    started = SPAWN.Event()
    process = SPAWN.Process(target=_stall, args=(str(local), str(remote), stall_key, cache_limit, started))
    process.start()
    try:
        assert started.wait(60), "the download never started"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.join()
    assert process.exitcode == -signal.SIGKILL


def _run_in_new_process(local: Path, remote: Path | str, cache_limit: int | None = None) -> None:
    process = SPAWN.Process(target=_read_all, args=(str(local), str(remote), cache_limit))
    process.start()
    process.join(60)
    assert process.exitcode == 0


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_killed_download_leaves_only_a_temporary_and_no_lock(make_dataset, local: Path, compression) -> None:
    dataset = make_dataset(shards=3, compression=compression)
    stalled = dataset.entries[1].stored_data.basename
    _kill_mid_download(local, dataset.remote, stalled)

    assert not (local / stalled).exists()
    assert not (local / dataset.entries[1].raw_data.basename).exists()
    assert (local / f".{stalled}.tmp-locked").is_file()
    lock = ControlFolder(local).shard_lock(dataset.entries[1].raw_data.basename)
    assert not is_locked_exclusively(lock)

    _run_in_new_process(local, dataset.remote)
    dataset.assert_intact(local)
    assert not list(local.glob(".*tmp*"))
    assert node_stats(local).shards_downloaded == len(dataset.entries)


@pytest.mark.slow
def test_killed_index_download_publishes_no_index(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=2)
    _kill_mid_download(local, dataset.remote, "index.json")
    assert not (local / "index.json").exists()

    _run_in_new_process(local, dataset.remote)
    dataset.assert_intact(local)
    assert not list(local.glob(".*tmp*"))


@pytest.mark.slow
def test_reservation_of_a_killed_download_stops_counting(make_dataset, local: Path) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    largest = max(entry.raw_data.bytes for entry in dataset.entries)
    # The killed process placed shard 0, evicted it to make room, and reserved room for shard 1.
    _kill_mid_download(local, dataset.remote, dataset.entries[1].raw_data.basename, cache_limit=largest)
    assert list(ControlFolder(local).reservations.iterdir()), "the killed process had reserved its bytes"

    # With the dead reservation counted, no shard would fit in a one-shard cache.
    _run_in_new_process(local, dataset.remote, cache_limit=largest)
    assert dataset.cached_bytes(local) <= largest
    assert not list(ControlFolder(local).reservations.iterdir())


class SignallingStore:
    """Wraps a store; sets ``started`` when the first shard download begins."""

    def __init__(self, inner: object, started: object) -> None:
        self.inner = inner
        self.started = started

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        if key != "index.json":
            self.started.set()  # type: ignore[attr-defined]
        return self.inner.download(key, dest, timeout=timeout)  # type: ignore[attr-defined]


def _download_from_remote(local: str, remote: str, started: object) -> None:
    store = SignallingStore(open_store(remote), started)
    cache = ShardCache(CacheConfig(local=local, remote=remote), store)  # type: ignore[arg-type]
    for entry in cache.open_index():
        cache.ensure(entry)


@pytest.mark.slow
def test_killed_mid_remote_download_then_a_new_process_reads_everything(
    make_dataset, upload_remote, remote_proxy, local: Path
) -> None:
    dataset = make_dataset(shards=2, shard_bytes=64_000)
    url = upload_remote(dataset)
    remote_proxy.bandwidth = 16_000  # bytes/s: a shard takes about four seconds
    started = SPAWN.Event()
    process = SPAWN.Process(target=_download_from_remote, args=(str(local), url, started))
    process.start()
    try:
        assert started.wait(60)
        time.sleep(0.5)  # let part of the body arrive
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.join()
    assert not (local / "shard.00000.mds").exists()
    assert not is_locked_exclusively(ControlFolder(local).shard_lock("shard.00000.mds"))

    remote_proxy.bandwidth = None
    _run_in_new_process(local, url)
    dataset.assert_intact(local)
    assert not list(local.glob(".*tmp*"))
