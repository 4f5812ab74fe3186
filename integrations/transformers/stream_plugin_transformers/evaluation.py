"""Exact evaluation through ``Trainer.evaluate``: every sample of the evaluation set counted once.

On D ranks the last batch of a rank may end with a repeated sample, so that every rank runs the same
number of steps (``StreamingDataLoader.real_samples``). The Trainer's ``evaluation_loop`` gathers each
step's loss (repeated ``eval_batch_size`` times), logits and labels from every rank. Two pieces cut the
repeats out, keeping every collective the same shape on every rank, so nothing can hang:

- ``cut_repeats`` (in ``prediction_step``) runs the model on a batch's real samples only, so its mean
  loss is theirs, and pads logits and labels back to the batch's size;
- ``ExactGather`` (the Trainer's ``gather_function`` during the loop) gathers each rank's count of real
  samples with the values, and keeps only those rows of each rank's part.

The mean of the gathered losses is then the mean over samples, as on one process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from accelerate import Accelerator

from stream_plugin import StreamingDataLoader
from stream_plugin.reading.batch_rows import first_rows, pad_rows


def batch_in_hand(loader: StreamingDataLoader) -> tuple[int, int] | None:
    """(real samples, size) of the batch the loader handed out last, or None outside a pass."""
    position = loader.position
    if position is None or position.batches == 0:
        return None
    index = position.batches - 1
    real = loader.real_samples(index)
    return real, real + loader.repeats_in(index)


def cut_repeats(
    loader: StreamingDataLoader,
    inputs: dict[str, Any],
    step: Callable[[dict[str, Any]], tuple[Any, Any, Any]],
) -> tuple[Any, Any, Any]:
    """``step(inputs)`` on the batch's real samples, logits and labels padded back to the batch's size.

    A batch with no real sample (a rank's last batch holding only a repeat) runs whole: ``ExactGather``
    drops all of its rows.
    """
    counts = batch_in_hand(loader)
    if counts is None or counts[0] in (0, counts[1]):
        return step(inputs)
    real, size = counts
    loss, logits, labels = step(first_rows(inputs, real, size))
    return loss, pad_rows(logits, size, -100), pad_rows(labels, size, -100)


class ExactGather:
    """A ``gather_function`` for ``evaluation_loop``: each rank's real rows of the batch in hand, in rank order."""

    def __init__(self, accelerator: Accelerator, loader: StreamingDataLoader) -> None:
        self.accelerator = accelerator
        self.loader = loader

    def __call__(self, value: Any) -> Any:
        counts = batch_in_hand(self.loader)
        real = counts[0] if counts is not None else 0
        device = _device_of(value)
        reals = self.accelerator.gather(torch.tensor([real], device=device)).tolist()
        return _keep_real_rows(self.accelerator.gather(value), reals)


def _keep_real_rows(value: Any, reals: list[int]) -> Any:
    if isinstance(value, torch.Tensor):
        if not value.ndim:
            return value
        rows = value.shape[0] // len(reals)
        parts = [value[rank * rows : rank * rows + min(rows, real)] for rank, real in enumerate(reals)]
        return torch.cat(parts)
    if isinstance(value, dict):
        return type(value)({key: _keep_real_rows(item, reals) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return type(value)(_keep_real_rows(item, reals) for item in value)
    return value


def _device_of(value: Any) -> torch.device:
    if isinstance(value, torch.Tensor):
        return value.device
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, torch.Tensor | dict | list | tuple):
                return _device_of(item)
    return torch.device("cpu")


__all__ = ["ExactGather", "batch_in_hand", "cut_repeats"]
