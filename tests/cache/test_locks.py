"""File locks between real processes, and the control-folder layout."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

from stream_plugin.cache.locks import (
    CONTROL_DIRNAME,
    ControlFolder,
    is_control,
    is_locked_exclusively,
    locked,
    try_locked,
)

SPAWN = multiprocessing.get_context("spawn")


def _hold(path: str, shared: bool, ready: object, seconds: float) -> None:
    with locked(path, shared=shared):
        ready.set()  # type: ignore[attr-defined]
        time.sleep(seconds)


def _start_holder(path: Path, *, shared: bool = False, seconds: float = 60.0) -> multiprocessing.Process:
    ready = SPAWN.Event()
    process = SPAWN.Process(target=_hold, args=(str(path), shared, ready, seconds))
    process.start()
    assert ready.wait(30), "holder process did not take the lock"
    return process


def test_exclusive_lock_held_by_another_process_refuses_try_lock(tmp_path: Path) -> None:
    path = tmp_path / "a.lock"
    holder = _start_holder(path)
    try:
        with try_locked(path) as acquired:
            assert not acquired
        assert is_locked_exclusively(path)
    finally:
        holder.kill()
        holder.join()


def test_lock_of_a_killed_process_is_released_by_the_kernel(tmp_path: Path) -> None:
    path = tmp_path / "a.lock"
    holder = _start_holder(path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    with try_locked(path) as acquired:
        assert acquired


def test_shared_locks_coexist_and_block_an_exclusive_one(tmp_path: Path) -> None:
    path = tmp_path / "a.lock"
    holder = _start_holder(path, shared=True)
    try:
        with try_locked(path, shared=True) as acquired:
            assert acquired
        with try_locked(path) as acquired:
            assert not acquired
        assert not is_locked_exclusively(path)
    finally:
        holder.kill()
        holder.join()


def test_blocking_lock_is_granted_when_the_holder_releases(tmp_path: Path) -> None:
    path = tmp_path / "a.lock"
    holder = _start_holder(path, seconds=0.5)
    started = time.monotonic()
    with locked(path):
        waited = time.monotonic() - started
    holder.join()
    assert 0.05 < waited < 10


def test_two_threads_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    path = tmp_path / "a.lock"
    with locked(path), try_locked(path) as acquired:
        assert not acquired


def test_lock_files_of_sub_folder_basenames_are_flat_and_distinct(tmp_path: Path) -> None:
    control = ControlFolder(tmp_path)
    names = ["shard.00000.mds", "3/shard.00000.mds", "3%2Fshard.00000.mds", "a", "a.lock/x"]
    paths = [control.shard_lock(name) for name in names]
    assert len(set(paths)) == len(names)
    assert all(path.parent == tmp_path / CONTROL_DIRNAME / "shards" for path in paths)


def test_control_folder_is_recognised_in_basenames() -> None:
    assert is_control(".stream_plugin/locks/x")
    assert is_control(".stream_plugin")
    assert not is_control("shard.00000.mds")
    assert not is_control("3/.stream_plugin")
