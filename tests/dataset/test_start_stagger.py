"""``start_stagger``: node i of N holds each process's first shard downloads back i/N x S seconds.

The delay is pure (``stagger_delay``); the hold is a per-process ``StartGate``; a real run of two nodes
(processes with an env-var world, each reading through its own group of a loopback server that logs
when each request arrives) shows node 1's first shard request at least its delay after it began to
read, node 0's first, and both indexes fetched before either began.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from support.ranks import launch_ranks
from support.sim_runs import RANK_SCRIPT, REPO, write_dataset
from support.throttle_proxy import ThrottleServer, file_kind

from stream_plugin.cache.start_stagger import StartGate, check_start_stagger, stagger_delay
from stream_plugin.errors import ConfigError, ConfigTypeError
from stream_plugin.reading.config import DatasetConfig


@pytest.mark.parametrize("nodes", [1, 2, 3, 8, 1000])
def test_node_i_of_n_waits_i_over_n_of_the_stagger(nodes: int) -> None:
    for node in {0, nodes // 2, nodes - 1}:
        assert stagger_delay(node, nodes, 10.0) == pytest.approx(10.0 * node / nodes)
    assert stagger_delay(0, nodes, 10.0) == 0.0
    assert stagger_delay(nodes - 1, nodes, 0.0) == 0.0


def test_a_node_outside_the_world_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"start_stagger: expected a node index in \[0, 4\), found 4; check RANK"):
        stagger_delay(4, 4, 10.0)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_negative_or_non_finite_stagger_is_refused(bad: float) -> None:
    with pytest.raises(ConfigError, match=r"start_stagger: expected a number of seconds >= 0, found .*; pass e\.g\."):
        DatasetConfig(start_stagger=bad)


@pytest.mark.parametrize("bad", ["10", True, None])
def test_a_stagger_that_is_not_a_number_is_refused(bad: object) -> None:
    with pytest.raises(ConfigTypeError, match=r"start_stagger: expected a number of seconds >= 0, found "):
        DatasetConfig.from_arguments(start_stagger=bad)


def test_the_stagger_defaults_to_zero_and_keeps_seconds_as_a_float() -> None:
    assert DatasetConfig().start_stagger == 0.0
    assert DatasetConfig(start_stagger=3).start_stagger == 3.0
    assert check_start_stagger(0) == 0.0
    assert check_start_stagger(np.float32(2.5)) == 2.5 and type(check_start_stagger(np.int64(2))) is float


def test_the_stagger_does_not_shape_the_order() -> None:
    assert DatasetConfig(start_stagger=5.0).fingerprint(["i"], ["w"]) == DatasetConfig().fingerprint(["i"], ["w"])


def test_a_gate_holds_downloads_until_its_delay_after_the_first_ask() -> None:
    gate = StartGate(0.2)
    asked = time.monotonic()
    gate.ask()
    time.sleep(0.05)
    gate.ask()  # a later ask does not move the hold
    gate.wait()
    assert time.monotonic() - asked >= 0.2
    assert gate.spent


def test_a_gate_without_delay_is_spent_from_the_start() -> None:
    assert StartGate(0.0).spent


STAGGER = 2.0  # node 1 of 2 waits 1 s


def test_node_1_starts_its_shard_downloads_half_the_stagger_after_node_0(tmp_path: Path) -> None:
    root = tmp_path / "site"
    write_dataset(root / "ds", samples=16, per_shard=4, payload=64)
    with ThrottleServer(root) as server:
        command = [sys.executable, str(RANK_SCRIPT), "--remote", server.remote("node{node}", "ds")]
        command += ["--local", str(tmp_path / "cache"), "--device-batch", "2", "--workers", "1"]
        command += ["--dataset", json.dumps({"start_stagger": STAGGER})]
        outputs = launch_ranks(command, world=2, ranks_per_node=1, env={"PYTHONPATH": str(REPO)}, timeout=120)
        log = list(server.log)
    # Each rank's zero: after a barrier of both ranks, just before its loader started (its worker asks later).
    zero = [output["zero"] for output in outputs]

    def first(node: int, kind: str) -> float:
        return min(arrival for arrival, group, method, path, _ in log if group == f"node{node}" and file_kind(path) == kind)

    assert first(1, "shard") - zero[1] >= stagger_delay(1, 2, STAGGER)  # 1 s after node 1 began to read
    assert first(0, "shard") < first(1, "shard")  # node 0 is not held back
    assert first(0, "index") < zero[0] and first(1, "index") < zero[1]  # the index is fetched at once
    assert sorted(sample for rank in outputs for batch in rank["batches"] for sample in batch) == list(range(16))
