"""The Lightning test rig: a tiny dataset, a model that records the sample ids it trains on, and ``run``.

``run(RunConfig)`` trains in this process; ``python rig.py '<RunConfig as JSON>'`` trains in a fresh
process (Lightning's DDP launcher re-runs that same command line for the other ranks). Every rank appends
one JSON line per training step to ``<records>/<tag>-rank<r>.jsonl``; ``merged_steps`` rebuilds the global
batch of every step from those files, later runs replacing the steps an earlier run trained before a
resume went back over them.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, OnExceptionCheckpoint

from stream_plugin import MDSWriter
from stream_plugin_lightning import DatasetSpec, PreemptionCheckpoint, StreamingDataModule, StreamSpec

# Two streams with disjoint ids, so a global batch shows which stream each sample came from.
STREAMS = {"alpha": range(0, 120), "beta": range(1000, 1080)}
VAL_IDS = range(5000, 5036)
GLOBAL_BATCH = 8


def write_dataset(root: Path) -> None:
    """Write the streams and a validation set as small MDS shards under ``root`` (the "remote")."""
    columns = {"id": "int", "x": "ndarray:float32", "y": "float32"}
    for name, ids in {**STREAMS, "val": VAL_IDS}.items():
        with MDSWriter(out=str(root / name), columns=columns, size_limit=1 << 10) as writer:
            for sample_id in ids:
                x = np.full(4, sample_id % 97 / 97.0, dtype=np.float32)
                writer.write({"id": sample_id, "x": x, "y": float(x.sum())})


def dataset_specs(remote: Path, cache: Path) -> dict[str, DatasetSpec]:
    """Train on a 60 / 40 mix of the two streams (shuffled); validate on the val set in order."""
    train = DatasetSpec(
        streams=[
            StreamSpec(remote=(remote / "alpha").as_uri(), local=str(cache / "alpha"), proportion=0.6),
            StreamSpec(remote=(remote / "beta").as_uri(), local=str(cache / "beta"), proportion=0.4),
        ],
        epoch_size=200,
        shuffle=True,
        shuffle_seed=17,
    )
    val = DatasetSpec(remote=(remote / "val").as_uri(), local=str(cache / "val"))
    return {"train": train, "val": val}


@dataclass
class RunConfig:
    """One training run. Paths are strings so the config travels as JSON to a subprocess."""

    remote: str
    cache: str
    records: str
    checkpoints: str
    tag: str
    devices: int = 1
    num_workers: int = 0
    max_epochs: int = 3
    global_batch_size: int = GLOBAL_BATCH
    batch_size: int | None = None
    ckpt_path: str | None = None
    one_cycle: bool = False  # configure_optimizers reads trainer.estimated_stepping_batches
    every_step_checkpoints: bool = False  # a ModelCheckpoint per step plus two epoch-end ones
    manual_save_at_step: int | None = None  # trainer.save_checkpoint inside training_step
    fail_at_step: int | None = None  # raise in training_step (an on-exception checkpoint is written)
    preemption: bool = False
    check_every_n_steps: int = 2
    step_delay: float = 0.0  # seconds per step, so a signal can land mid-epoch
    val: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


class RecordingModel(pl.LightningModule):
    """A linear regressor that appends the ids of every training batch to a per-rank file."""

    def __init__(self, config: RunConfig) -> None:
        super().__init__()
        self.config = config
        self.layer = torch.nn.Linear(4, 1)
        self.val_ids: list[list[int]] = []

    def _append(self, record: dict[str, Any]) -> None:
        path = Path(self.config.records) / f"{self.config.tag}-rank{self.global_rank}.jsonl"
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        step = self.trainer.global_step
        if self.config.fail_at_step == step:
            raise RuntimeError(f"rig: planned failure at step {step}")
        if self.config.manual_save_at_step == step:
            self.trainer.save_checkpoint(Path(self.config.checkpoints) / f"manual-step{step}.ckpt")
        if self.config.step_delay:
            import time

            time.sleep(self.config.step_delay)
        ids = [int(sample_id) for sample_id in batch["id"]]
        self._append({"step": step, "epoch": self.current_epoch, "batch": batch_idx, "ids": ids})
        prediction = self.layer(batch["x"]).squeeze(-1)
        return torch.nn.functional.mse_loss(prediction, batch["y"])

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        if batch_idx == 0:
            self.val_ids.append([])
        self.val_ids[-1].extend(int(sample_id) for sample_id in batch["id"])
        self.log("val_batches", float(batch_idx + 1), reduce_fx="max")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> list[int]:
        return [int(sample_id) for sample_id in batch["id"]]

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.01)
        if not self.config.one_cycle:
            return optimizer
        # The usual OneCycleLR recipe; it makes Lightning build the train loader early (issue 20550).
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.05, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class _WriteMarker(Callback):
    """Records each rank's pid, so a test can signal the right process."""

    def __init__(self, records: str) -> None:
        self.records = records

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        Path(self.records, f"pid-rank{trainer.global_rank}").write_text(str(os.getpid()))


def build_callbacks(config: RunConfig) -> list[Callback]:
    callbacks: list[Callback] = [_WriteMarker(config.records)]
    if config.every_step_checkpoints:
        callbacks += [
            ModelCheckpoint(
                dirpath=config.checkpoints, filename="{step}", every_n_train_steps=1, save_top_k=-1
            ),
            ModelCheckpoint(
                dirpath=config.checkpoints,
                filename="trainend-{epoch}",
                every_n_epochs=1,
                save_on_train_epoch_end=True,
                save_top_k=-1,
            ),
            # A monitored metric only to give this one its own state key (the checkpoints must not share one).
            ModelCheckpoint(
                dirpath=config.checkpoints,
                filename="valend-{epoch}",
                monitor="val_batches",
                every_n_epochs=1,
                save_top_k=-1,
            ),
        ]
    if config.fail_at_step is not None:
        callbacks.append(OnExceptionCheckpoint(dirpath=config.checkpoints))
    if config.preemption:
        callbacks.append(
            PreemptionCheckpoint(dirpath=config.checkpoints, check_every_n_steps=config.check_every_n_steps)
        )
    return callbacks


def build_datamodule(config: RunConfig) -> StreamingDataModule:
    specs = dataset_specs(Path(config.remote), Path(config.cache))
    return StreamingDataModule(
        train=specs["train"],
        val=specs["val"] if config.val else None,
        batch_size=config.batch_size,
        global_batch_size=config.global_batch_size,
        num_workers=config.num_workers,
        **config.extra,
    )


def build_trainer(config: RunConfig) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=config.devices,
        strategy="ddp" if config.devices > 1 else "auto",
        max_epochs=config.max_epochs,
        callbacks=build_callbacks(config),
        logger=False,
        enable_checkpointing=config.every_step_checkpoints,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=2 if config.val else 0,
        default_root_dir=config.checkpoints,
    )


def quiet() -> None:
    """Silence the warnings every run prints (few workers, read-only numpy arrays from zero-copy reads)."""
    for pattern in (".*does not have many workers.*", ".*not writable.*", ".*sync_dist=True.*"):
        warnings.filterwarnings("ignore", message=pattern)


def run(config: RunConfig) -> tuple[RecordingModel, StreamingDataModule, pl.Trainer]:
    """Train as ``config`` says, in this process (and, for DDP, Lightning's child processes)."""
    quiet()
    Path(config.records).mkdir(parents=True, exist_ok=True)
    pl.seed_everything(0, verbose=False)
    model = RecordingModel(config)
    datamodule = build_datamodule(config)
    trainer = build_trainer(config)
    trainer.fit(model, datamodule=datamodule, ckpt_path=config.ckpt_path)
    return model, datamodule, trainer


def read_records(records: Path, tag: str) -> dict[int, dict[str, Any]]:
    """step -> {"epoch", "batch", "ids" (the global batch: rank 0's ids, then rank 1's, ...)} for one run."""
    per_rank = sorted(
        records.glob(f"{tag}-rank*.jsonl"), key=lambda path: int(path.stem.rsplit("rank", 1)[1])
    )
    steps: dict[int, dict[str, Any]] = {}
    for path in per_rank:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            entry = steps.setdefault(
                record["step"], {"epoch": record["epoch"], "batch": record["batch"], "ids": []}
            )
            assert (entry["epoch"], entry["batch"]) == (record["epoch"], record["batch"]), (path, record)
            entry["ids"].extend(record["ids"])
    return steps


def merged_steps(records: Path, tags: list[str]) -> dict[int, dict[str, Any]]:
    """The steps of a chain of runs: each later run replaces the steps it trained again."""
    merged: dict[int, dict[str, Any]] = {}
    for tag in tags:
        steps = read_records(records, tag)
        if steps:
            first = min(steps)
            merged = {step: entry for step, entry in merged.items() if step < first}
            merged.update(steps)
    return dict(sorted(merged.items()))


def main(argv: list[str]) -> int:
    config = RunConfig(**json.loads(argv[1]))
    run(config)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
