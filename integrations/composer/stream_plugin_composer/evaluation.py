"""``ExactEvaluation``: evaluation metrics count every sample exactly once on any number of ranks.

On D ranks, the last batch of an evaluation pass may end with a repeated sample on some ranks, so that
every rank runs the same number of steps (``StreamingDataLoader`` docs). This callback cuts those
repeats out of ``state.batch`` and ``state.outputs`` after the forward pass and before Composer updates
the metrics, so ``update_metric`` sees each sample of the evaluation set once. Every rank still runs
every step: nothing can hang. A rank whose last batch holds only a repeat updates its metrics with an
empty batch.
"""

from __future__ import annotations

from composer.core import Callback, State
from composer.loggers import Logger

from stream_plugin import StreamingDataLoader
from stream_plugin.reading.batch_rows import first_rows


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
        state.batch = first_rows(state.batch, real, real + repeats)
        state.outputs = first_rows(state.outputs, real, real + repeats)
