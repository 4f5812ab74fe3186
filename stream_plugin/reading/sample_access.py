"""NumPy-style random access shared by the datasets: ``ds[i]``, ``ds[-1]``, ``ds[a:b]``, ``ds[[i, j]]``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def select_samples(at: Any, size: int, get_item: Callable[[int], Any]) -> Any:
    """One sample for an int (negative counts from the end), a list for a slice, list or ndarray."""
    if isinstance(at, (int, np.integer)) and not isinstance(at, bool):
        index = int(at) + size if at < 0 else int(at)
        if not 0 <= index < size:
            raise IndexError(f"sample index {at} is out of range for a dataset of {size} samples")
        return get_item(index)
    if isinstance(at, slice):
        return [get_item(index) for index in range(*at.indices(size))]
    if isinstance(at, (list, tuple, np.ndarray)):
        return [select_samples(int(index), size, get_item) for index in np.asarray(at).reshape(-1)]
    raise TypeError(f"dataset index: expected an int, slice, list or ndarray, found {type(at).__name__}")


__all__ = ["select_samples"]
