"""Exact resumption with a real Composer ``Trainer`` in this process (one rank, CPU).

Each test checkpoints at a different kind of save interval, resumes from that checkpoint with a new
``Trainer`` and compares the trained batches with the uninterrupted reference run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
from composer_harness import BATCHES_PER_EPOCH, EPOCHS, NUM_SAMPLES, assert_same_history, history_ids
from composer_inprocess import train_in_process
from support.resume import assert_same_output


def checkpoint(root: Path, name: str) -> str:
    path = root / "checkpoints" / name
    assert path.exists(), sorted(p.name for p in path.parent.iterdir())
    return str(path)


def test_the_reference_run_trains_each_sample_once_per_epoch(reference_history: list[list[int]]) -> None:
    assert len(reference_history) == EPOCHS * BATCHES_PER_EPOCH  # len(loader) made '3ep' exact
    for epoch in range(EPOCHS):
        batches = reference_history[epoch * BATCHES_PER_EPOCH : (epoch + 1) * BATCHES_PER_EPOCH]
        assert {batch[0] for batch in batches} == {epoch}
        assert Counter(i for batch in batches for i in batch[1:]) == Counter(range(NUM_SAMPLES))
    assert reference_history[0] != reference_history[BATCHES_PER_EPOCH]  # shuffled anew each epoch


def test_epoch_interval_checkpoint_resumes_at_the_next_epoch_without_replay(
    tiny_data: Path, tmp_path: Path, reference_history: list[list[int]]
) -> None:
    train_in_process(tiny_data, tmp_path, max_duration="2ep", save_interval="1ep")
    start = checkpoint(tmp_path, f"ep1-ba{BATCHES_PER_EPOCH}-rank0.pt")
    resumed = train_in_process(tiny_data, tmp_path, max_duration="3ep", load_path=start)
    assert_same_history(resumed, reference_history)


def test_epoch_interval_checkpoint_stores_the_next_epoch_at_sample_zero(
    tiny_data: Path, tmp_path: Path
) -> None:
    train_in_process(tiny_data, tmp_path, max_duration="2ep", save_interval="1ep")
    saved = torch.load(checkpoint(tmp_path, f"ep1-ba{BATCHES_PER_EPOCH}-rank0.pt"), weights_only=False)
    resume_state = saved["state"]["callbacks"]["ExactDataResumption"]["resume_state"]
    assert (resume_state["epoch"], resume_state["sample_in_epoch"]) == (1, 0)


def test_checkpoint_on_an_epochs_last_batch_resumes_at_the_next_epoch(
    tiny_data: Path, tmp_path: Path, reference_history: list[list[int]]
) -> None:
    # '25ba' saves after the last batch of epoch 0, before Composer moves its clock to epoch 1.
    train_in_process(tiny_data, tmp_path, max_duration="30ba", save_interval=f"{BATCHES_PER_EPOCH}ba")
    start = checkpoint(tmp_path, f"ep0-ba{BATCHES_PER_EPOCH}-rank0.pt")
    resumed = train_in_process(tiny_data, tmp_path, max_duration="3ep", load_path=start)
    assert_same_history(resumed, reference_history)


def test_mid_epoch_batch_checkpoint_resumes_exactly(
    tiny_data: Path, tmp_path: Path, reference_history: list[list[int]]
) -> None:
    train_in_process(tiny_data, tmp_path, max_duration="40ba", save_interval="7ba")
    start = checkpoint(tmp_path, "ep1-ba35-rank0.pt")  # 10 batches into epoch 1
    resumed = train_in_process(tiny_data, tmp_path, max_duration="3ep", load_path=start)
    assert_same_history(resumed, reference_history)


def test_sample_interval_checkpoint_resumes_exactly(
    tiny_data: Path, tmp_path: Path, reference_history: list[list[int]]
) -> None:
    train_in_process(tiny_data, tmp_path, max_duration="2ep", save_interval="96sp")  # every 12 batches
    start = checkpoint(tmp_path, "ep1-ba36-rank0.pt")
    resumed = train_in_process(tiny_data, tmp_path, max_duration="3ep", load_path=start)
    assert_same_history(resumed, reference_history)


def test_resume_with_persistent_workers_is_exact(
    tiny_data: Path, tmp_path: Path, reference_history: list[list[int]]
) -> None:
    train_in_process(
        tiny_data, tmp_path, max_duration="40ba", save_interval="1ep", num_workers=2, persistent_workers=True
    )
    start = checkpoint(tmp_path, f"ep1-ba{BATCHES_PER_EPOCH}-rank0.pt")
    resumed = train_in_process(
        tiny_data, tmp_path, max_duration="3ep", load_path=start, num_workers=2, persistent_workers=True
    )
    assert_same_history(resumed, reference_history)


def test_resume_with_the_loader_given_to_fit_is_exact(
    tiny_data: Path, tmp_path: Path, reference_history: list[list[int]]
) -> None:
    train_in_process(tiny_data, tmp_path, max_duration="40ba", save_interval="1ep", loader_in_fit=True)
    start = checkpoint(tmp_path, f"ep1-ba{BATCHES_PER_EPOCH}-rank0.pt")
    resumed = train_in_process(tiny_data, tmp_path, max_duration="3ep", load_path=start, loader_in_fit=True)
    assert_same_history(resumed, reference_history)


def test_a_smaller_global_batch_after_resume_finishes_the_epoch_without_gaps_or_repeats(
    tiny_data: Path, tmp_path: Path, reference_history: list[list[int]]
) -> None:
    train_in_process(tiny_data, tmp_path, max_duration="40ba", save_interval="7ba")
    start = checkpoint(tmp_path, "ep1-ba35-rank0.pt")  # 80 samples into epoch 1 at global batch 8
    resumed = train_in_process(tiny_data, tmp_path, max_duration="3ep", load_path=start, device_batch_size=4)
    assert_same_history(resumed[:35], reference_history[:35], what="the run before the checkpoint")
    for epoch in (1, 2):
        trained = [batch for batch in resumed if batch[0] == epoch]
        everything = [[epoch, *range(NUM_SAMPLES)]]
        assert_same_output(trained, everything, what=f"epoch {epoch}", ids=history_ids, ordered=False)
    assert {len(batch) - 1 for batch in resumed[35:]} == {4}


def test_a_batch_peeked_before_fit_does_not_shift_the_epochs(
    tiny_data: Path, tmp_path: Path, reference_history: list[list[int]]
) -> None:
    peeked = train_in_process(tiny_data, tmp_path, max_duration="3ep", peek=True)
    assert_same_history(peeked, reference_history, what="the run with a peeked batch")
