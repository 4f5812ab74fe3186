"""StreamingTrainer: every sample once over the ranks, the data position in each checkpoint-N, and an
exact continuation from it on 2 ranks, on 1, with workers, and after SIGTERM (real gloo runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hf_fixtures import GLOBAL_BATCH, SAMPLES, STEPS, Reference, train_config
from hf_runs import run_ranks

from stream_plugin_transformers import DATA_STATE_FILE, latest_checkpoint

pytestmark = pytest.mark.slow

STEPS_PER_EPOCH = SAMPLES // GLOBAL_BATCH


def test_an_epoch_trains_every_sample_once_over_two_ranks(hf_reference: Reference) -> None:
    epoch = [i for step in range(1, STEPS_PER_EPOCH + 1) for i in hf_reference.run.steps[step]]
    assert sorted(epoch) == list(range(SAMPLES))
    assert all(len(hf_reference.run.steps[step]) == GLOBAL_BATCH for step in range(1, STEPS + 1))


def test_each_checkpoint_holds_the_data_position_of_its_step(hf_reference: Reference) -> None:
    for step in (3, 6, 9, 12, 14):
        state = json.loads(Path(hf_reference.checkpoint(step), DATA_STATE_FILE).read_text())
        consumed = step * GLOBAL_BATCH
        assert (state["epoch"], state["sample_in_epoch"]) == divmod(consumed, SAMPLES), step
    assert latest_checkpoint(hf_reference.config["output_dir"]) == hf_reference.checkpoint(14)


def test_resume_on_two_ranks_with_forkserver_workers_continues_exactly(
    hf_reference: Reference, tmp_path: Path
) -> None:
    config = train_config(
        Path(hf_reference.config["data"]),
        tmp_path,
        resume=hf_reference.checkpoint(6),
        num_workers=2,
        start_method="forkserver",  # Python 3.14's default on Linux
    )
    run = run_ranks(config, world=2)
    assert run.codes == [0, 0], run.outputs
    assert run.steps == {step: hf_reference.run.steps[step] for step in range(7, STEPS + 1)}
    # Checkpoints saved with workers hold the same positions as the reference's (saved without).
    for step in (9, 12):
        saved = Path(tmp_path, f"checkpoint-{step}", DATA_STATE_FILE).read_text()
        assert saved == Path(hf_reference.checkpoint(step), DATA_STATE_FILE).read_text()


def test_resume_from_two_ranks_on_one_at_the_same_global_batch(
    hf_reference: Reference, tmp_path: Path
) -> None:
    # 1 process x 8 samples x 2 accumulation steps: the reference's global batch of 16; crosses the epoch end.
    config = train_config(
        Path(hf_reference.config["data"]), tmp_path, resume=hf_reference.checkpoint(9), batch_size=8
    )
    run = run_ranks(config, world=1)
    assert run.codes == [0], run.outputs
    assert run.steps == {step: hf_reference.run.steps[step] for step in range(10, STEPS + 1)}


def test_sigterm_saves_at_the_next_step_and_the_same_command_resumes(
    hf_reference: Reference, tmp_path: Path
) -> None:
    config = train_config(Path(hf_reference.config["data"]), tmp_path, save_steps=None, resume="latest")
    stopped = run_ranks({**config, "signal_at_step": 4, "signal_rank": 1, "tag": "first"}, world=2)
    assert stopped.codes == [143, 143], stopped.outputs
    # The signal came after step 4's check on rank 1: the ranks agree at step 5 and save it.
    assert latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint-5")
    rerun = run_ranks({**config, "tag": "second"}, world=2)
    assert rerun.codes == [0, 0], rerun.outputs
    assert stopped.steps == {step: hf_reference.run.steps[step] for step in range(1, 6)}
    assert rerun.steps == {step: hf_reference.run.steps[step] for step in range(6, STEPS + 1)}
