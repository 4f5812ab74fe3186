"""Real DDP (gloo, CPU) in subprocesses: a real SIGTERM mid-epoch, and restarts on more and fewer processes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from lightning_rig import (
    STEPS_PER_EPOCH,
    Reference,
    assert_retraces,
    finish_process,
    read_records,
    run,
    start_process,
    wait_for_progress,
)

from stream_plugin_lightning import is_complete_checkpoint, latest_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    ("signalled", "num_workers"),
    [
        ("rank 0", 0),  # what Kubernetes does: SIGTERM to the main process only
        ("rank 1", 0),  # only a non-zero rank knows: the ranks must still agree
        ("process group", 2),  # what a shell or SLURM does: every rank and DataLoader worker
    ],
)
def test_sigterm_mid_epoch_on_two_processes_resumes_exactly_on_one(
    reference: Reference, tmp_path: Path, signalled: str, num_workers: int
) -> None:
    config = reference.run_config(
        tmp_path,
        "two",
        devices=2,
        num_workers=num_workers,
        preemption=True,
        check_every_n_steps=3,
        step_delay=0.05,
        print_progress=True,
    )
    process = start_process(config)
    wait_for_progress(process, epoch=1, batch=2)
    if signalled == "process group":
        os.killpg(process.pid, signal.SIGTERM)  # the group this test started (start_new_session)
    else:
        pid = process.pid if signalled == "rank 0" else int((Path(config.records) / "pid-rank1").read_text())
        os.kill(pid, signal.SIGTERM)
    status, output = finish_process(process)

    assert status == 143, output[-4000:]
    checkpoints = Path(config.checkpoints)
    assert sorted(path.name for path in checkpoints.iterdir()) == ["last.ckpt"]  # no temporary file left
    assert is_complete_checkpoint(checkpoints / "last.ckpt")
    state = torch.load(checkpoints / "last.ckpt", weights_only=True)["StreamingDataModule"]["train"]
    assert state["epoch"] == 1 and 0 < state["sample_in_epoch"] < STEPS_PER_EPOCH * 8, state
    interrupted = read_records(Path(config.records), "two")
    # Every rank stopped at the step the checkpoint holds: nothing trained after it.
    assert max(interrupted) + 1 == STEPS_PER_EPOCH + state["sample_in_epoch"] // 8

    restarted = reference.run_config(
        tmp_path, "one", preemption=True, ckpt_path=latest_checkpoint(checkpoints)
    )
    run(restarted)
    resumed = read_records(Path(restarted.records), "one")
    assert min(resumed) == max(interrupted) + 1
    assert_retraces(reference.steps, interrupted, resumed)


def test_per_step_agreement_stops_both_ranks_at_the_step_rank_1_was_signalled_and_both_exit_143(
    reference: Reference, tmp_path: Path
) -> None:
    # Rank 1 alone sends itself SIGTERM as step 13 starts; agreeing at every step (the time-bounded
    # schedule with a 0 s interval: the default's code path) both ranks stop at the end of step 13.
    # Rank 0 reports its child's exit status.
    config = reference.run_config(
        tmp_path, "every", devices=2, preemption=True, signal_at_step=13, signal_rank=1, check_interval_s=0.0
    )
    status, output = finish_process(start_process(config))

    assert status == 143, output[-4000:]
    assert "PreemptionCheckpoint: local rank 1 exited with status 143" in output, output[-4000:]
    for rank in (0, 1):
        lines = Path(config.records, f"every-rank{rank}.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        assert records[-1]["step"] == 13, records[-1]
    state = torch.load(Path(config.checkpoints) / "last.ckpt", weights_only=True)["StreamingDataModule"][
        "train"
    ]
    assert (state["epoch"], state["sample_in_epoch"]) == (0, 14 * 8)


def test_one_to_two_processes_with_workers_then_a_crash_then_back_to_one(
    reference: Reference, tmp_path: Path
) -> None:
    # Resume #1: the reference's mid-epoch checkpoint (1 process) on 2 processes with 2 workers each; it
    # crashes inside step 40, and Lightning's OnExceptionCheckpoint saves. Resume #2: 1 process from there.
    two = reference.run_config(
        tmp_path,
        "two",
        devices=2,
        num_workers=2,
        ckpt_path=reference.checkpoint("step=7.ckpt"),
        fail_at_step=40,
    )
    status, output = finish_process(start_process(two))
    assert status != 0 and "planned failure at step 40" in output, output[-4000:]
    on_exception = Path(two.checkpoints) / "on_exception.ckpt"
    assert is_complete_checkpoint(on_exception)

    one = reference.run_config(tmp_path, "one", ckpt_path=str(on_exception))
    run(one)
    first, second = read_records(Path(two.records), "two"), read_records(Path(one.records), "one")
    assert (min(first), max(first), min(second)) == (7, 39, 40)  # the interrupted step 40 runs again
    assert_retraces(reference.steps, reference.steps, first, second)
