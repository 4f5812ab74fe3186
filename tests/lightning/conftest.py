"""Shared Lightning fixtures: the dataset, written once, and one uninterrupted reference run.

The reference run trains 3 epochs on one process with a checkpoint after every step and at both kinds
of epoch end, plus a manual ``save_checkpoint`` from inside a training step; every resume test starts
from one of those files and must retrace the reference's global batches exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning_rig import Reference, RunConfig, read_records, run, write_dataset

pytest.importorskip("lightning")


@pytest.fixture(scope="session")
def lightning_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lightning-data")
    write_dataset(root / "remote")
    return root


@pytest.fixture(scope="session")
def reference(lightning_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    out = tmp_path_factory.mktemp("lightning-reference")
    config = RunConfig(
        remote=str(lightning_data / "remote"),
        cache=str(lightning_data / "cache"),
        records=str(out / "records"),
        checkpoints=str(out / "checkpoints"),
        tag="reference",
        every_step_checkpoints=True,
        one_cycle=True,  # so resumes may use the scheduler too
        manual_save_at_step=10,
    )
    model, _, _ = run(config)
    steps = read_records(Path(config.records), "reference")
    return Reference(
        config=config, steps=steps, val_passes=model.val_ids, checkpoints=Path(config.checkpoints)
    )
