"""``EvalLoader``: a ``StreamingDataLoader`` whose every pass is epoch 0 in full (evaluation).

Evaluation reads the whole set each time it runs, in one fixed order, whatever training did with the
dataset's epoch counter: each pass rewinds to the start of epoch 0. Persistent workers are started
once, to replay that pass every time (``workers_should_replay``). The Lightning DataModule's val / test
/ predict loaders and the Hugging Face Trainer's evaluation loader are this class.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stream_plugin.reading.cursor import IterationPlan
from stream_plugin.reading.dataset import StreamingDataset
from stream_plugin.reading.loader import StreamingDataLoader


class EvalLoader(StreamingDataLoader):
    """A ``StreamingDataLoader`` that iterates epoch 0 in full on every pass (validation, test, predict).

    Persistent workers are started once, to replay that pass every time.
    """

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        dataset = self.dataset
        if isinstance(dataset, StreamingDataset):
            dataset.set_epoch(0)
        yield from super().__iter__()

    def workers_should_replay(self, plan: IterationPlan) -> bool:
        # Every pass rewinds to the start of epoch 0, so the first pass is the one to repeat.
        return True


__all__ = ["EvalLoader"]
