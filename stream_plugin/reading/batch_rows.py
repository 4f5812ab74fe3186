"""Cut a collated batch to its first rows: how the integrations drop rank-balance repeats for exact evaluation.

``StreamingDataLoader.real_samples(batch_idx)`` says how many leading samples of a batch are not repeats;
``first_rows(batch, real, size)`` keeps those rows of every tensor or array whose first dimension is the
batch size, walking mappings, lists and tuples. ``pad_rows`` puts a cut batch back to its size with a
fill value, for collectives that need the same shape on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def first_rows(value: Any, count: int, size: int) -> Any:
    """``value`` with every tensor or array whose first dimension is ``size`` cut to its first ``count`` rows."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return value[:count] if value.ndim and value.shape[0] == size else value
    if isinstance(value, Mapping):
        return type(value)({key: first_rows(item, count, size) for key, item in value.items()})  # type: ignore[call-arg]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(first_rows(item, count, size) for item in value))
    if isinstance(value, list | tuple):
        if len(value) == size and not any(
            isinstance(item, torch.Tensor | np.ndarray | Mapping) for item in value
        ):
            return type(value)(value[:count])  # a list of per-sample values (strings, ids)
        return type(value)(first_rows(item, count, size) for item in value)
    return value


def pad_rows(value: Any, size: int, fill: float) -> Any:
    """``value`` with every tensor of fewer than ``size`` rows padded to ``size`` rows of ``fill``."""
    if isinstance(value, torch.Tensor):
        missing = size - value.shape[0] if value.ndim else 0
        if missing <= 0:
            return value
        padding = torch.full((missing, *value.shape[1:]), fill, dtype=value.dtype, device=value.device)
        return torch.cat([value, padding])
    if isinstance(value, Mapping):
        return type(value)({key: pad_rows(item, size, fill) for key, item in value.items()})  # type: ignore[call-arg]
    if isinstance(value, list | tuple):
        return type(value)(pad_rows(item, size, fill) for item in value)
    return value


__all__ = ["first_rows", "pad_rows"]
