"""Validation under Lightning DDP with torchmetrics: ``python exact_eval_rig.py DATA OUT DEVICES``.

Each rank updates two metrics in ``validation_step``: one with every batch as given, one with the
samples before the rank-balance repeats (the one line of docs/order.md, "Exact evaluation"). Rank 0
writes both results to OUT.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torchmetrics.aggregation import CatMetric, MeanMetric

from stream_plugin import MDSWriter
from stream_plugin_lightning import DatasetSpec, StreamingDataModule

NUM_SAMPLES = 101  # prime: not divisible by 2 or 3
BATCH_SIZE = 4


def write_data(folder: Path) -> None:
    with MDSWriter(out=str(folder), columns={"id": "int", "value": "float32"}, size_limit=1 << 10) as writer:
        for sample_id in range(NUM_SAMPLES):
            writer.write({"id": sample_id, "value": float(sample_id % 13) / 7.0})


class Recorder(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.ids = CatMetric()
        self.mean = MeanMetric()
        self.naive_ids = CatMetric()

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        n = self.trainer.val_dataloaders.real_samples(batch_idx)  # the one line
        self.ids.update(batch["id"][:n].float())
        self.mean.update(batch["value"][:n])
        self.naive_ids.update(batch["id"].float())

    def on_validation_epoch_end(self) -> None:
        ids, mean, naive = self.ids.compute(), self.mean.compute(), self.naive_ids.compute()
        if self.trainer.is_global_zero:
            result = {
                "ids": sorted(int(i) for i in ids.tolist()),
                "mean": float(mean),
                "naive_count": int(naive.numel()),
                "world_size": self.trainer.world_size,
            }
            Path(sys.argv[2]).write_text(json.dumps(result))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(data: Path, devices: int) -> None:
    module = StreamingDataModule(
        val=DatasetSpec(remote=data.as_uri(), local=str(data.parent / f"cache-{devices}")),
        batch_size=BATCH_SIZE,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.validate(Recorder(), datamodule=module)
    if torch.distributed.is_initialized():
        # Before the interpreter exits: gloo's threads can otherwise abort it at finalization
        # ("terminate called without an active exception"; pytorch/pytorch#179291).
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[3]))
