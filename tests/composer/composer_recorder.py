"""``SampleRecorder``: a test callback that records which sample ids every global batch trained on.

The history lives in the callback's state, so it is saved in every checkpoint and restored on resume:
batches trained after the last checkpoint of a killed run disappear with the rollback, exactly as
their effect on the model does. At the end of a run the history is therefore the sequence of batches
the final model was trained on, comparable with an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from composer.core import Callback, State
from composer.loggers import Logger
from composer.utils import dist


def write_json_atomically(path: Path, payload: Any) -> None:
    """Readers polling ``path`` never see a half-written file."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(payload))
    os.replace(partial, path)


class SampleRecorder(Callback):
    """Appends ``[epoch, *global batch ids]`` per batch; writes ``out`` (rank 0) when the fit ends.

    Each rank also writes ``progress-rank{r}.json`` (its pid and position) after every batch, so a test
    can signal the training processes at a known point. ``delay_s`` slows batches down to leave the
    test time to do so.
    """

    def __init__(self, out: str, delay_s: float = 0.0) -> None:
        self.out = Path(out)
        self.delay_s = float(delay_s)
        self.history: list[list[int]] = []

    def batch_end(self, state: State, logger: Logger) -> None:
        del logger
        ids = self.batch_ids(state)
        per_rank = dist.all_gather_object(ids)  # rank order: rank r holds slice r of the global batch
        self.history.append([int(state.timestamp.epoch), *[i for part in per_rank for i in part]])
        progress = {
            "pid": os.getpid(),
            "batches": len(self.history),
            "epoch": int(state.timestamp.epoch),
            "batch_in_epoch": int(state.timestamp.batch_in_epoch),
        }
        write_json_atomically(self.out.parent / f"progress-rank{dist.get_global_rank()}.json", progress)
        if self.delay_s:
            time.sleep(self.delay_s)

    def batch_ids(self, state: State) -> list[int]:
        """The sample ids of this rank's batch: its ``id`` column."""
        return [int(sample_id) for sample_id in state.batch["id"].tolist()]

    def fit_end(self, state: State, logger: Logger) -> None:
        del state, logger
        if dist.get_global_rank() == 0:
            write_json_atomically(self.out, {"history": self.history})

    def state_dict(self) -> dict[str, Any]:
        return {"history": [list(batch) for batch in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [list(batch) for batch in state["history"]]
