"""The few collectives the library runs, over the default ``torch.distributed`` process group.

One element-wise MAX all-reduce serves them all: the preemption agreement (any rank's signal), and
gathering one value per rank (each rank writes its own slot of a zeroed vector). Each is a single
collective that every rank of the group must reach.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def distributed() -> bool:
    """Whether this process is one of several ranks of an initialised default process group."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def max_over_ranks(values: list[int], device: torch.device | str | None = None) -> list[int]:
    """The element-wise maximum of ``values`` over every rank (``values`` itself in one process).

    ``device`` is where the reduction runs: the current CUDA device under NCCL, else the CPU.
    """
    if not distributed():
        return values
    import torch
    import torch.distributed as dist

    if device is None:
        nccl = dist.get_backend() == "nccl"
        device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    tensor = torch.tensor(values, dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [int(value) for value in tensor.tolist()]


def gather_per_rank(values: list[int], rank: int, world_size: int) -> list[list[int]]:
    """Every rank's ``values`` (non-negative ints, the same count on every rank), by global rank, in
    one collective: ``result[r]`` is rank ``r``'s list."""
    width = len(values)
    if any(value < 0 for value in values):
        raise ValueError(f"gather_per_rank: expected non-negative ints, found {values}")
    flat = [0] * (width * world_size)
    flat[rank * width : (rank + 1) * width] = values
    gathered = max_over_ranks(flat)
    return [gathered[r * width : (r + 1) * width] for r in range(world_size)]


__all__ = ["distributed", "gather_per_rank", "max_over_ranks"]
