"""A tiny model for the Lightning example: it learns y = sum(x) and records which samples it trained on.

Every rank appends one JSON line per training step to ``<record_dir>/<run_name>-rank<r>.jsonl``: the
step, epoch, batch index and the sample ids of its batch. Concatenating the ranks' ids of a step (rank 0
first) gives that step's global batch, which is how the main job compares runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch


class IdRecordingRegressor(pl.LightningModule):
    """A linear regressor over 8 features that logs the ids of every batch it trains on.

    Args:
        record_dir: folder for the per-rank id records (relative to the working directory).
        run_name: prefix of this run's record files.
        lr: learning rate of the SGD optimizer, under a OneCycle schedule over the whole run.
        print_progress: print ``progress <epoch> <batch>`` on rank 0 after each step (for the main job).
        step_delay: seconds to sleep per step, to slow the demo down enough to interrupt it mid-epoch.
    """

    def __init__(
        self,
        record_dir: str = "records",
        run_name: str = "run",
        lr: float = 0.05,
        print_progress: bool = False,
        step_delay: float = 0.0,
    ) -> None:
        super().__init__()
        self.record_dir = Path(record_dir)
        self.run_name = run_name
        self.lr = lr
        self.print_progress = print_progress
        self.step_delay = step_delay
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.step_delay:
            time.sleep(self.step_delay)
        record = {
            "step": self.trainer.global_step,
            "epoch": self.current_epoch,
            "batch": batch_idx,
            "ids": [int(sample_id) for sample_id in batch["id"]],
        }
        self.record_dir.mkdir(parents=True, exist_ok=True)
        with open(self.record_dir / f"{self.run_name}-rank{self.global_rank}.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.print_progress and self.global_rank == 0:
            print(f"progress {self.current_epoch} {batch_idx}", flush=True)
        prediction = self.layer(batch["x"]).squeeze(-1)
        return torch.nn.functional.mse_loss(prediction, batch["y"])

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        prediction = self.layer(batch["x"]).squeeze(-1)
        self.log("val_loss", torch.nn.functional.mse_loss(prediction, batch["y"]), sync_dist=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        # The usual OneCycleLR recipe: it reads estimated_stepping_batches, which makes Lightning build the
        # train loader early and skip its own loader-state restore (Lightning issue 20550). The
        # StreamingDataModule's checkpoint state does not depend on that restore.
        total_steps = int(self.trainer.estimated_stepping_batches)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.lr, total_steps=total_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
