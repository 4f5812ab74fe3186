"""The data-parallel dims of the strategy's DeviceMesh: which ranks read different samples.

``ModelParallelStrategy`` (and any strategy with a ``device_mesh``) puts ranks side by side that must
train on the same batch (tensor, context, pipeline parallel). Only the data-parallel dims of its mesh
choose samples; ``data_parallel_mesh`` finds them by name (the core's ``data_parallel_dims``: the
recognised names, or the DataModule's ``data_parallel_dims``), once, at the edge, and the DataModule passes
the sub-mesh to its datasets. Strategies without a mesh (DDP, FSDP, DeepSpeed) make every rank a
data-parallel rank, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stream_plugin import data_parallel_submesh
from stream_plugin.errors import ConfigError


@dataclass(frozen=True)
class DataParallelMesh:
    """``mesh``: the sub-mesh of the data-parallel ``dims`` of the strategy's mesh, ``size`` ranks."""

    mesh: Any  # torch.distributed.device_mesh.DeviceMesh
    dims: tuple[str, ...]
    size: int


def strategy_mesh(strategy: object) -> Any:
    """The strategy's DeviceMesh, or None for strategies without one (DDP, FSDP, DeepSpeed)."""
    from torch.distributed.device_mesh import DeviceMesh

    mesh = getattr(strategy, "device_mesh", None)
    return mesh if isinstance(mesh, DeviceMesh) else None


def data_parallel_mesh(strategy: object, chosen: Sequence[str] | None = None) -> DataParallelMesh | None:
    """The data-parallel part of ``strategy``'s mesh, or None when it has no mesh (every rank reads its own)."""
    mesh = strategy_mesh(strategy)
    if mesh is None:
        if chosen is not None:
            raise ConfigError(
                f"data_parallel_dims: expected a strategy with a device_mesh (ModelParallelStrategy), found "
                f"{type(strategy).__name__} without one, where every rank is a data-parallel rank; remove "
                "data_parallel_dims"
            )
        return None
    sub_mesh = data_parallel_submesh(mesh, chosen, where="the strategy's device mesh")
    dims = tuple(sub_mesh.mesh_dim_names or ())
    return DataParallelMesh(mesh=sub_mesh, dims=dims, size=int(sub_mesh.size()))
