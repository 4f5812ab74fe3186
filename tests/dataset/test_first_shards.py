"""``first_shards``: at most K of a node's first-shard downloads at once (``cache.first_shards``).

The slots, the process's side and the validation in-process; then two ranks of one node reading through
a loopback server that keeps when each GET was in flight.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from support.ranks import launch_ranks
from support.sim_runs import RANK_SCRIPT, REPO, write_dataset
from support.throttle_proxy import Throttle, ThrottleServer, file_kind

from stream_plugin.cache.first_shards import FirstShards, check_first_shards, hold_slot, preferred_slot
from stream_plugin.cache.locks import ControlFolder
from stream_plugin.errors import ConfigError, ConfigTypeError
from stream_plugin.reading.config import DatasetConfig


def test_first_shards_defaults_to_none_and_keeps_a_count() -> None:
    assert DatasetConfig().first_shards is None
    assert DatasetConfig(first_shards=3).first_shards == 3


@pytest.mark.parametrize("bad", [0, -2])
def test_a_count_below_one_is_refused(bad: int) -> None:
    with pytest.raises(ConfigError, match=rf"first_shards: expected a positive int or None, found {bad}; pass e.g"):
        DatasetConfig(first_shards=bad)


@pytest.mark.parametrize("bad", [2.0, "4", True])
def test_a_count_that_is_not_an_int_is_refused(bad: object) -> None:
    with pytest.raises(ConfigTypeError, match="first_shards: expected a positive int or None, found"):
        check_first_shards(bad)


def test_first_shards_does_not_shape_the_order() -> None:
    assert DatasetConfig(first_shards=2).fingerprint(["i"], ["w"]) == DatasetConfig().fingerprint(["i"], ["w"])


def test_a_download_waits_while_every_slot_is_held(tmp_path: Path) -> None:
    control = ControlFolder(tmp_path)
    entered = threading.Event()

    def download() -> None:
        with hold_slot(control, 1):
            entered.set()

    with hold_slot(control, 1):
        thread = threading.Thread(target=download)
        thread.start()
        assert not entered.wait(0.2)  # the only slot is held: the other download waits
    thread.join(5)
    assert entered.is_set()


def test_two_slots_are_held_at_once(tmp_path: Path) -> None:
    control = ControlFolder(tmp_path)
    with hold_slot(control, 2) as first, hold_slot(control, 2) as second:
        assert {first, second} == {0, 1}


def test_the_preferred_slot_is_within_the_count() -> None:
    assert all(0 <= preferred_slot(3, pid, thread) < 3 for pid in range(5) for thread in range(7))


def test_a_process_takes_no_slot_once_it_has_its_first_shard(tmp_path: Path) -> None:
    control = ControlFolder(tmp_path)
    first = FirstShards(1)
    with hold_slot(control, 1):  # another process holds the node's only slot
        first.reach()  # a cached shard was this process's first
        with first.slot(control):  # does not wait
            pass


def test_a_download_ends_the_process_first_shard(tmp_path: Path) -> None:
    first = FirstShards(1)
    with first.slot(ControlFolder(tmp_path)):
        assert not first.reached
    assert first.reached


LATENCY = 1.0  # seconds each GET waits for its first byte: two first shards asked at once overlap


def _first_shard_spans(tmp_path: Path, first_shards: int | None) -> list[tuple[float, float]]:
    """Two ranks of one node, one shard each: when each shard's GET was in flight at the server."""
    root = tmp_path / "site"
    write_dataset(root / "ds", samples=4, per_shard=4, payload=64)
    with ThrottleServer(root, Throttle(latency=LATENCY)) as server:
        command = [sys.executable, str(RANK_SCRIPT), "--remote", server.remote("node{node}", "ds")]
        command += ["--local", str(tmp_path / "cache"), "--device-batch", "2", "--workers", "0"]
        command += ["--dataset", json.dumps({"first_shards": first_shards})]
        outputs = launch_ranks(command, world=2, ranks_per_node=2, env={"PYTHONPATH": str(REPO)}, timeout=120)
        spans = [(start, end) for start, end, _, path in server.spans if file_kind(path) == "shard"]
    assert sorted(sample for rank in outputs for batch in rank["batches"] for sample in batch) == list(range(4))
    assert len(spans) == 2, f"expected one GET per shard, found {spans}"
    return sorted(spans)


def test_one_slot_lets_one_first_shard_download_at_a_time_across_the_node(tmp_path: Path) -> None:
    (_, first_end), (second_start, _) = _first_shard_spans(tmp_path, first_shards=1)
    assert second_start >= first_end  # the second rank's first GET went out once the first's was answered
