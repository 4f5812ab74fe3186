"""torch's ``default_collate`` with the function for tensors replaced (``collate_with_tensor_fn``).

torch documents this way of extending ``default_collate`` (its ``collate`` with a ``collate_fn_map``,
torch 2.0 on) but keeps it in the private ``torch.utils.data._utils.collate``; ``collate_tensor_fn`` is
its function for tensors, which stacks into a new shared-memory segment in a worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data._utils.collate import collate, collate_tensor_fn, default_collate_fn_map

TensorCollate = Callable[..., torch.Tensor]  # (batch: list[Tensor], *, collate_fn_map=None) -> Tensor


def collate_with_tensor_fn(batch: Any, tensor_fn: TensorCollate) -> Any:
    """``default_collate(batch)``, with each batch of tensors (at any depth) collated by ``tensor_fn``."""
    return collate(batch, collate_fn_map={**default_collate_fn_map, torch.Tensor: tensor_fn})


def stack_in_new_segment(batch: list[torch.Tensor]) -> torch.Tensor:
    """``default_collate``'s own stacking of tensors (in a worker: into a new shared-memory segment)."""
    stacked: torch.Tensor = collate_tensor_fn(batch)
    return stacked


__all__ = ["TensorCollate", "collate_with_tensor_fn", "stack_in_new_segment"]
