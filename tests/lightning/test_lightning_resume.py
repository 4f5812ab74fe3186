"""Exact resumption in one process: every kind of checkpoint Lightning writes continues the reference run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from lightning_rig import (
    STEPS_PER_EPOCH,
    STREAMS,
    VAL_IDS,
    Reference,
    assert_retraces,
    build_datamodule,
    read_records,
    run,
)

from stream_plugin.errors import StateError

pytestmark = pytest.mark.timeout(300)


def resume(
    reference: Reference, tmp_path: Path, checkpoint: str, **changes: Any
) -> dict[int, dict[str, Any]]:
    config = reference.run_config(tmp_path, "resumed", ckpt_path=reference.checkpoint(checkpoint), **changes)
    run(config)
    return read_records(Path(config.records), "resumed")


def assert_continues_reference(
    reference: Reference, resumed: dict[int, dict[str, Any]], first_step: int
) -> None:
    assert min(resumed) == first_step, (
        f"expected the resume to start at step {first_step}, found {min(resumed)}"
    )
    assert_retraces(reference.steps, reference.steps, resumed)


def test_reference_epochs_are_shuffled_permutations_of_the_mix(reference: Reference) -> None:
    all_ids = sorted(sample_id for ids in STREAMS.values() for sample_id in ids)
    epochs = [
        [
            sample_id
            for step in range(epoch * STEPS_PER_EPOCH, (epoch + 1) * STEPS_PER_EPOCH)
            for sample_id in reference.steps[step]["ids"]
        ]
        for epoch in range(3)
    ]
    assert sorted(reference.steps) == list(range(3 * STEPS_PER_EPOCH))
    assert all(sorted(epoch) == all_ids for epoch in epochs)
    assert epochs[0] != epochs[1] != epochs[2]


@pytest.mark.parametrize(
    ("checkpoint", "first_step", "num_workers"),
    [
        ("step=7.ckpt", 7, 0),  # mid-epoch, epoch 0
        ("step=7.ckpt", 7, 2),
        ("step=33.ckpt", 33, 0),  # mid-epoch, epoch 1
        ("step=33.ckpt", 33, 2),
        ("step=25.ckpt", 25, 0),  # written after the last batch of epoch 0
        ("trainend-epoch=0.ckpt", 25, 0),  # written at the epoch boundary (on_train_epoch_end)
        ("valend-epoch=0.ckpt", 25, 2),  # written at the epoch boundary (after validation)
        ("manual-step10.ckpt", 10, 0),  # trainer.save_checkpoint inside training_step: step 10 runs again
    ],
)
def test_resume_retraces_the_uninterrupted_run(
    reference: Reference, tmp_path: Path, checkpoint: str, first_step: int, num_workers: int
) -> None:
    resumed = resume(reference, tmp_path, checkpoint, num_workers=num_workers)
    assert_continues_reference(reference, resumed, first_step)


def test_resume_with_estimated_stepping_batches_in_configure_optimizers(
    reference: Reference, tmp_path: Path
) -> None:
    # Lightning builds the train loader inside configure_optimizers here and then skips its own loader
    # state restore (Lightning issue 20550); the DataModule state must still put the data at step 33.
    resumed = resume(reference, tmp_path, "step=33.ckpt", one_cycle=True, num_workers=2)
    assert_continues_reference(reference, resumed, 33)


def test_resume_with_persistent_workers(reference: Reference, tmp_path: Path) -> None:
    resumed = resume(reference, tmp_path, "step=40.ckpt", num_workers=2, extra={"persistent_workers": True})
    assert_continues_reference(reference, resumed, 40)


def test_resume_when_lightning_epochs_are_cut_short_by_limit_train_batches(
    reference: Reference, tmp_path: Path
) -> None:
    # Each Lightning epoch trains 10 of the 25 batches; the next one starts the next data epoch.
    limited = {"limit_train_batches": 10}
    full = reference.run_config(tmp_path / "full", "full", every_step_checkpoints=True, trainer_extra=limited)
    run(full)
    expected = read_records(Path(full.records), "full")
    assert sorted(expected) == list(range(30)) and expected[10]["ids"] == reference.steps[25]["ids"]
    resumed = reference.run_config(
        tmp_path / "resumed",
        "resumed",
        ckpt_path=str(Path(full.checkpoints) / "step=14.ckpt"),
        trainer_extra=limited,
    )
    run(resumed)
    assert_retraces(expected, expected, read_records(Path(resumed.records), "resumed"))


def test_checkpoint_data_state_is_lightnings_position(reference: Reference) -> None:
    checkpoint = torch.load(reference.checkpoint("step=33.ckpt"), weights_only=True)
    state = checkpoint["StreamingDataModule"]["train"]
    assert (state["epoch"], state["sample_in_epoch"], state["epoch_batch_size"]) == (1, 8 * 8, 8)
    boundary = torch.load(reference.checkpoint("trainend-epoch=0.ckpt"), weights_only=True)
    assert (
        boundary["StreamingDataModule"]["train"]["epoch"],
        boundary["StreamingDataModule"]["train"]["sample_in_epoch"],
    ) == (1, 0)


def test_validation_passes_are_complete_and_identical(reference: Reference) -> None:
    sanity, *passes = reference.val_passes
    assert len(passes) == 3
    assert all(ids == passes[0] for ids in passes)
    assert sorted(set(passes[0])) == list(VAL_IDS)
    assert sanity == passes[0][: len(sanity)]


def test_predict_yields_every_sample_in_order(reference: Reference, tmp_path: Path) -> None:
    import lightning.pytorch as pl
    from lightning_rig import RecordingModel

    config = reference.run_config(tmp_path, "predict")
    datamodule = build_datamodule(config)
    datamodule.specs["predict"] = datamodule.specs["val"]
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    batches = trainer.predict(RecordingModel(config), datamodule=datamodule)
    assert batches is not None
    first = [sample_id for batch in batches for sample_id in batch]
    assert sorted(set(first)) == list(VAL_IDS)
    again = trainer.predict(RecordingModel(config), datamodule=datamodule)
    assert again is not None
    assert [sample_id for batch in again for sample_id in batch] == first


def test_resume_without_data_state_raises_with_the_cause(reference: Reference, tmp_path: Path) -> None:
    # As written by a run without StreamingDataModule: no DataModule state, no stateful loader state.
    checkpoint = torch.load(reference.checkpoint("step=7.ckpt"), weights_only=False)
    del checkpoint["StreamingDataModule"]
    del checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    stripped = tmp_path / "stripped.ckpt"
    torch.save(checkpoint, stripped)
    config = reference.run_config(tmp_path, "stripped", ckpt_path=str(stripped))
    with pytest.raises(StateError, match="holds no StreamingDataModule state"):
        run(config)


def test_resume_mid_epoch_with_another_global_batch_size_raises(reference: Reference, tmp_path: Path) -> None:
    config = reference.run_config(
        tmp_path, "smaller", ckpt_path=reference.checkpoint("step=7.ckpt"), global_batch_size=4
    )
    with pytest.raises(StateError, match="written mid-epoch at global batch size 8 and this run's is 4"):
        run(config)


def test_resume_at_an_epoch_boundary_may_change_the_global_batch_size(
    reference: Reference, tmp_path: Path
) -> None:
    config = reference.run_config(
        tmp_path, "bigger", ckpt_path=reference.checkpoint("trainend-epoch=0.ckpt"), global_batch_size=16
    )
    run(config)
    steps = read_records(Path(config.records), "bigger")
    epoch_one = [
        sample_id for step in sorted(steps) if steps[step]["epoch"] == 1 for sample_id in steps[step]["ids"]
    ]
    # A whole epoch (padding may repeat a few samples to fill the last global batch of 16).
    assert set(epoch_one) == {sample_id for ids in STREAMS.values() for sample_id in ids}
