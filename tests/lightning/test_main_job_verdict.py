"""The main job's verdict (examples/lightning/main_job.py, the README's "Two commands"): it says
"identical" only when every step's global batch of sample ids, preempted then resumed, matches the
uninterrupted run's; a single id, a step missing or a step trained twice differently is a difference."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning"


@pytest.fixture()
def main_job(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(EXAMPLE))  # restored after the test, with what main_job adds
    import main_job

    return main_job


def _record(records: Path, run: str, rank: int, steps: dict[int, list[int]], epoch: int = 0) -> None:
    lines = [
        json.dumps({"step": step, "epoch": epoch, "batch": step, "ids": ids}) for step, ids in steps.items()
    ]
    (records / f"{run}-rank{rank}.jsonl").write_text("".join(line + "\n" for line in lines))


def _runs(main_job: ModuleType, records: Path) -> tuple[dict[int, Any], dict[int, Any]]:
    expected = main_job.read_steps(records, "uninterrupted")
    found = main_job.chain(main_job.read_steps(records, "preempted"), main_job.read_steps(records, "resumed"))
    return found, expected


def test_the_verdict_is_identical_when_every_global_batch_matches(
    main_job: ModuleType, tmp_path: Path
) -> None:
    # Uninterrupted on 1 process; preempted on 2 (rank 0 then rank 1 make the global batch), resumed on 1
    # from step 2, after the preempted run had also trained step 2 (it is trained again).
    _record(tmp_path, "uninterrupted", 0, {0: [5, 1, 7, 3], 1: [0, 6, 2, 4], 2: [9, 8, 11, 10]})
    _record(tmp_path, "preempted", 0, {0: [5, 1], 1: [0, 6], 2: [9, 8]})
    _record(tmp_path, "preempted", 1, {0: [7, 3], 1: [2, 4], 2: [11, 10]})
    _record(tmp_path, "resumed", 0, {2: [9, 8, 11, 10]})
    assert main_job.first_difference(*_runs(main_job, tmp_path)) is None


@pytest.mark.parametrize(
    ("resumed", "difference"),
    [
        ({2: [9, 8, 10, 11]}, "step 2: uninterrupted"),  # two ids swapped in the last global batch
        ({}, "step 2: uninterrupted"),  # the preempted run's step 2 stands, and it differs
        ({2: [9, 8, 11, 10], 3: [12, 13, 14, 15]}, "the runs trained different steps: 4 vs 3"),
    ],
)
def test_the_verdict_names_the_first_step_that_differs(
    main_job: ModuleType, tmp_path: Path, resumed: dict[int, list[int]], difference: str
) -> None:
    _record(tmp_path, "uninterrupted", 0, {0: [5, 1, 7, 3], 1: [0, 6, 2, 4], 2: [9, 8, 11, 10]})
    _record(tmp_path, "preempted", 0, {0: [5, 1], 1: [0, 6], 2: [9, 8]})
    _record(tmp_path, "preempted", 1, {0: [7, 3], 1: [2, 4], 2: [10, 11]})
    _record(tmp_path, "resumed", 0, resumed)
    found = main_job.first_difference(*_runs(main_job, tmp_path))
    assert found is not None and found.startswith(difference), found
