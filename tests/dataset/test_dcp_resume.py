"""torch.distributed.checkpoint (a torchtitan-style loop): the loader is a DCP ``Stateful``; a state saved
by 4 data-parallel ranks loads on 2 and continues exactly, with workers forked and from a fork server."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from support.datasets import write_ids
from support.ranks import launch_ranks
from torch.distributed.checkpoint.stateful import Stateful

from stream_plugin import StreamingDataLoader, StreamingDataset

pytestmark = pytest.mark.slow

RANK = Path(__file__).with_name("dcp_rank.py")
SAMPLES = 96
STEPS = 16  # a global batch of 8: 12 steps an epoch, so the runs cross an epoch's end


def run(config: dict[str, Any], world: int) -> dict[int, list[int]]:
    outputs = launch_ranks(
        [sys.executable, str(RANK), json.dumps(config)], world=world, ranks_per_node=world, timeout=240
    )
    steps: dict[int, list[int]] = {}
    for output in outputs:
        for step, ids in output["steps"].items():
            steps.setdefault(int(step), []).extend(ids)
    return {step: sorted(ids) for step, ids in sorted(steps.items())}


def test_the_loader_is_a_dcp_stateful(tmp_path: Path) -> None:
    write_ids(tmp_path / "data", range(8))
    loader = StreamingDataLoader(StreamingDataset(local=str(tmp_path / "data"), batch_size=2), batch_size=2)
    assert isinstance(loader, Stateful)


def test_dcp_state_of_four_ranks_continues_exactly_on_two_with_forkserver_workers(tmp_path: Path) -> None:
    # Forked workers are what every other resume test runs; here each rank's worker comes from a fork server.
    write_ids(tmp_path / "data", range(SAMPLES))
    common = {"data": str(tmp_path / "data"), "steps": STEPS, "num_workers": 1, "start_method": "forkserver"}
    reference = run({**common, "batch_size": 2, "save_at": 5, "save_dir": str(tmp_path / "dcp")}, world=4)
    assert sorted(i for step in range(1, 13) for i in reference[step]) == list(range(SAMPLES))
    resumed = run({**common, "batch_size": 4, "start_step": 5, "resume": str(tmp_path / "dcp")}, world=2)
    assert resumed == {step: reference[step] for step in range(6, STEPS + 1)}
