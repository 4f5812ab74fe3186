"""``TokenSampleRecorder`` for llm-foundry runs (loaded through the YAML's ``code_paths``).

A batch's samples are named by their first token: the sample id in the pre-tokenized fixture, the
``doc<id>`` word's token in the raw-text one. It also keeps rank 0's loss per batch, to compare
resumed and uninterrupted runs of the same world size step for step.
"""

from __future__ import annotations

from typing import Any

from composer.core import State
from composer.loggers import Logger
from composer.utils import dist
from composer_recorder import SampleRecorder, write_json_atomically
from llmfoundry.registry import callbacks


class TokenSampleRecorder(SampleRecorder):
    def __init__(self, out: str, delay_s: float = 0.0) -> None:
        super().__init__(out, delay_s)
        self.losses: list[float] = []

    def batch_ids(self, state: State) -> list[int]:
        return [int(token) for token in state.batch["input_ids"][:, 0].tolist()]

    def batch_end(self, state: State, logger: Logger) -> None:
        loss = state.loss
        self.losses.append(float(loss.item() if hasattr(loss, "item") else loss))  # type: ignore[union-attr]
        super().batch_end(state, logger)

    def fit_end(self, state: State, logger: Logger) -> None:
        del state, logger
        if dist.get_global_rank() == 0:
            write_json_atomically(self.out, {"history": self.history, "losses": self.losses})

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "losses": list(self.losses)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.losses = [float(loss) for loss in state["losses"]]


callbacks.register("token_sample_recorder", func=TokenSampleRecorder)
