"""Composer evaluation with torchmetrics on N ranks: ``composer -n D exact_eval_script.py DATA OUT``.

The model's ``update_metric`` updates its metrics with each batch as Composer gives it; the
``ExactEvaluation`` callback (when the third argument is ``exact``) cuts the rank-balance repeats out
first. Rank 0 writes the computed metrics to OUT.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from composer import Trainer
from composer.core import Evaluator
from composer.models import ComposerModel
from composer.utils import dist
from torchmetrics.aggregation import CatMetric, MeanMetric

from stream_plugin import MDSWriter, StreamingDataLoader, StreamingDataset
from stream_plugin_composer import ExactEvaluation, streaming_dataspec

NUM_SAMPLES = 101  # prime: divisible by none of 2 and 3
BATCH_SIZE = 4


def write_data(folder: Path) -> None:
    with MDSWriter(out=str(folder), columns={"id": "int", "value": "float32"}, size_limit=1 << 10) as writer:
        for sample_id in range(NUM_SAMPLES):
            writer.write({"id": sample_id, "value": float(sample_id % 13) / 7.0})


class Recorder(ComposerModel):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.ids = CatMetric()
        self.mean = MeanMetric()

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.layer(batch["value"].float().unsqueeze(1)).squeeze(1)

    def loss(self, outputs: Any, batch: Any) -> torch.Tensor:
        return outputs.sum()

    def get_metrics(self, is_train: bool = False) -> dict[str, Any]:
        return {} if is_train else {"ids": self.ids, "mean": self.mean}

    def update_metric(self, batch: Any, outputs: Any, metric: Any) -> None:
        assert len(outputs) == len(batch["id"])  # the callback cuts both alike
        if isinstance(metric, CatMetric):
            metric.update(batch["id"].float())
        else:
            metric.update(batch["value"])


def main(data: Path, out: Path, exact: bool) -> None:
    dist.initialize_dist("cpu")
    dataset = StreamingDataset(
        remote=data.as_uri(), local=str(out.parent / f"cache-{dist.get_global_rank()}"), batch_size=BATCH_SIZE
    )
    loader = StreamingDataLoader(dataset, batch_size=BATCH_SIZE)
    model = Recorder()
    trainer = Trainer(
        model=model,
        eval_dataloader=Evaluator(label="val", dataloader=streaming_dataspec(loader)),
        callbacks=[ExactEvaluation()] if exact else [],
        device="cpu",
        progress_bar=False,
        log_to_console=False,
    )
    trainer.eval()
    metrics = trainer.state.eval_metrics["val"]  # Composer evaluates with its own copies of the metrics
    ids, mean = metrics["ids"].compute(), metrics["mean"].compute()
    if dist.get_global_rank() == 0:
        out.write_text(
            json.dumps(
                {
                    "ids": sorted(int(i) for i in ids.tolist()),
                    "mean": float(mean),
                    "world_size": dist.get_world_size(),
                }
            )
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "exact")
