"""Real processes: the YAML runner under ``python`` and ``composer -n 2`` (gloo on CPU), real SIGTERM
and SIGKILL sent to the training processes, and the same command rerun to autoresume.

Every finished run's trained batches (``[epoch, *sample ids]``, carried through checkpoints by
``SampleRecorder``) must equal the uninterrupted reference run's.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from composer_harness import (
    BATCHES_PER_EPOCH,
    assert_same_history,
    clear_progress,
    in_epoch,
    launch,
    read_history,
    run_config,
    signal_process_group,
    signal_ranks,
    wait_for_progress,
    write_config,
)

pytestmark = pytest.mark.slow

PREEMPTED = 128 + signal.SIGTERM  # PreemptionCheckpoint's default exit code


def latest_checkpoint(root: Path) -> tuple[int, int]:
    """(epoch, batch) of the checkpoint ``latest-rank0.pt`` points to."""
    target = os.readlink(root / "checkpoints" / "latest-rank0.pt")
    found = re.fullmatch(r"ep(\d+)-ba(\d+)-rank0\.pt", Path(target).name)
    assert found, target
    return int(found.group(1)), int(found.group(2))


def test_sigterm_on_two_ranks_checkpoints_mid_epoch_and_resumes_on_one_rank(
    tiny_data: Path, tmp_path: Path, reference_history: list[list[int]]
) -> None:
    config = write_config(
        tmp_path, run_config(tmp_path, tiny_data, save_interval="7ba", num_workers=2, delay_s=0.05)
    )
    first = launch(tmp_path, config, nproc=2)
    signal_ranks(wait_for_progress(first, in_epoch(1, after_batch=4)), signal.SIGTERM)
    assert first.wait() == PREEMPTED, first.logs()
    epoch, batch = latest_checkpoint(tmp_path)
    assert epoch >= 1 and batch % BATCHES_PER_EPOCH != 0, "the preemption checkpoint is mid-epoch"

    second = launch(tmp_path, config, nproc=1)
    assert second.wait() == 0, second.logs()
    assert_same_history(read_history(tmp_path), reference_history)


def test_sigkill_in_epoch_one_resumes_from_the_epoch_checkpoint_on_two_ranks(
    tiny_data: Path, tmp_path: Path, reference_history: list[list[int]]
) -> None:
    config = write_config(tmp_path, run_config(tmp_path, tiny_data, save_interval="1ep", delay_s=0.05))
    first = launch(tmp_path, config, nproc=1)
    signal_ranks(wait_for_progress(first, in_epoch(1, after_batch=8)), signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    assert latest_checkpoint(tmp_path) == (1, BATCHES_PER_EPOCH)  # '1ep': saved as epoch 1 began
    # What a SIGKILL during a save leaves: a truncated file newer than `latest`. Composer would refuse
    # to start over it (FileExistsError); the runner sets it aside.
    (tmp_path / "checkpoints" / "ep1-ba40-rank0.pt").write_bytes(b"truncated")

    second = launch(tmp_path, config, nproc=2)
    assert second.wait() == 0, second.logs()
    assert_same_history(read_history(tmp_path), reference_history)
    assert (tmp_path / "checkpoints" / ".unfinished-ep1-ba40-rank0.pt").exists()


def test_two_preemptions_resume_exactly_and_a_finished_run_reports_complete(
    tiny_data: Path, tmp_path: Path, reference_history: list[list[int]]
) -> None:
    config = run_config(tmp_path, tiny_data, save_interval="40sp", num_workers=2, delay_s=0.05)
    config_path = write_config(tmp_path, config)
    # First to the whole process group, DataLoader workers included (they must not die mid-batch),
    # then to the training process only.
    for epoch, after_batch, whole_group in ((0, 12, True), (2, 3, False)):
        clear_progress(tmp_path)
        run = launch(tmp_path, config_path, nproc=1)
        progress = wait_for_progress(run, in_epoch(epoch, after_batch=after_batch))
        if whole_group:
            signal_process_group(run, signal.SIGTERM)
        else:
            signal_ranks(progress, signal.SIGTERM)
        assert run.wait() == PREEMPTED, run.logs()

    final = launch(tmp_path, config_path, nproc=1)
    assert final.wait() == 0, final.logs()
    assert_same_history(read_history(tmp_path), reference_history)

    checkpoints = sorted(path.name for path in (tmp_path / "checkpoints").iterdir())
    again = launch(tmp_path, config_path, nproc=1)
    assert again.wait() == 0, again.logs()
    assert "already complete" in again.log.read_text()
    assert sorted(path.name for path in (tmp_path / "checkpoints").iterdir()) == checkpoints
