"""Real processes: 1, 2 and 4 ranks, each with 2 DataLoader workers, give identical global batches."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from support.ranks import launch_ranks
from support.resume import assert_continues, assert_same_output

SCRIPT = Path(__file__).with_name("rank_process.py")
GLOBAL_BATCH = 8


def run_ranks(
    world: int,
    remote: Path,
    cache: Path,
    *,
    ranks_per_node: int | None = None,
    gloo: bool = False,
    **options: Any,
) -> list[dict[str, Any]]:
    """Start ``world`` rank processes at once; return each rank's output, in rank order."""
    ranks_per_node = ranks_per_node or world
    command = [sys.executable, str(SCRIPT), "--remote", f"file://{remote}", "--cache", str(cache)]
    command += ["--device-batch", str(GLOBAL_BATCH // world)]
    for name, value in options.items():
        command += [f"--{name.replace('_', '-')}", str(value)]
    if gloo:
        command.append("--gloo")
    return launch_ranks(command, world=world, ranks_per_node=ranks_per_node)


def global_batches(outputs: list[dict[str, Any]]) -> list[list[int]]:
    """Global batch t = every rank's batch t, in rank order."""
    counts = {len(output["batches"]) for output in outputs}
    assert len(counts) == 1, f"ranks yielded different numbers of batches: {counts}"
    return [sum((output["batches"][t] for output in outputs), []) for t in range(counts.pop())]


@pytest.fixture(scope="module")
def reference(remote_1k: Path, tmp_path_factory: pytest.TempPathFactory) -> list[list[int]]:
    """Two epochs on one process with 2 workers."""
    return global_batches(run_ranks(1, remote_1k, tmp_path_factory.mktemp("ref"), epochs=2))


def test_reference_covers_every_sample_once_per_epoch(reference: list[list[int]]) -> None:
    per_epoch = 1000 // GLOBAL_BATCH
    for epoch in range(2):
        ids = [i for batch in reference[epoch * per_epoch : (epoch + 1) * per_epoch] for i in batch]
        assert sorted(ids) == list(range(1000))


@pytest.mark.parametrize(
    ("world", "ranks_per_node", "gloo"),
    [(2, 2, False), (4, 2, False), (2, 1, True), (4, 4, True)],
    ids=["2-ranks-env", "2-nodes-x-2-ranks-env", "2-nodes-gloo", "4-ranks-gloo"],
)
def test_global_batches_are_identical_on_every_layout(
    reference: list[list[int]], remote_1k: Path, tmp_path: Path, world: int, ranks_per_node: int, gloo: bool
) -> None:
    outputs = run_ranks(world, remote_1k, tmp_path, ranks_per_node=ranks_per_node, gloo=gloo, epochs=2)
    assert global_batches(outputs) == reference


def test_state_saved_on_two_processes_resumes_exactly_on_one_and_on_four(
    reference: list[list[int]], remote_1k: Path, tmp_path: Path
) -> None:
    steps = 37
    saved = run_ranks(2, remote_1k, tmp_path / "first", steps=steps)
    head = global_batches(saved)
    assert_same_output(head, reference[:steps], what="the run on 2 processes before the checkpoint")
    states = [output["state"] for output in saved]
    assert all(state == states[0] for state in states), "the state must not depend on the rank"
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(states[0]))
    for world, gloo in ((1, False), (4, True)):
        resumed = run_ranks(
            world, remote_1k, tmp_path / f"resumed{world}", gloo=gloo, epochs=2, state_in=state_file
        )
        assert_continues(head, global_batches(resumed), reference, what=f"the resume on {world} processes")
