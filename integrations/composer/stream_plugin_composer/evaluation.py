"""``ExactEvaluation``: evaluation metrics count every sample exactly once on any number of ranks.

On D ranks, the last batch of an evaluation pass may end with a repeated sample on some ranks, so that
every rank runs the same number of steps (``StreamingDataLoader`` docs). This callback cuts those
repeats out of ``state.batch`` and ``state.outputs`` after the forward pass and before Composer updates
the metrics, so ``update_metric`` sees each sample of the evaluation set once. Every rank still runs
every step: nothing can hang. A rank whose last batch holds only a repeat updates its metrics with an
empty batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from composer.core import Callback, State
from composer.loggers import Logger

from stream_plugin import StreamingDataLoader


def first_samples(value: Any, count: int, size: int) -> Any:
    """``value`` with every tensor or array whose first dimension is ``size`` cut to its first ``count``
    rows; mappings, lists and tuples are walked, anything else is kept."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return value[:count] if value.ndim and value.shape[0] == size else value
    if isinstance(value, Mapping):
        return type(value)({key: first_samples(item, count, size) for key, item in value.items()})  # type: ignore[call-arg]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(first_samples(item, count, size) for item in value))
    if isinstance(value, (list, tuple)):
        if len(value) == size and not any(
            isinstance(item, (torch.Tensor, np.ndarray, Mapping)) for item in value
        ):
            return type(value)(value[:count])  # a list of per-sample values (strings, ids)
        return type(value)(first_samples(item, count, size) for item in value)
    return value


class ExactEvaluation(Callback):
    """Drops rank-balance repeats from evaluation batches before metrics are updated.

    Registered for llm-foundry YAML as ``callbacks: {stream_plugin_exact_eval: {}}``.
    """

    def eval_after_forward(self, state: State, logger: Logger) -> None:
        del logger
        loader = state.dataloader
        if not isinstance(loader, StreamingDataLoader):
            return
        position = loader.position
        if position is None or position.batches == 0:
            return
        # Composer iterates the loader itself (no fetch ahead): the batch in hand is the last one handed out.
        index = position.batches - 1
        repeats = loader.repeats_in(index)
        if not repeats:
            return
        real = loader.real_samples(index)
        state.batch = first_samples(state.batch, real, real + repeats)
        state.outputs = first_samples(state.outputs, real, real + repeats)
