"""The data-parallel dims of the strategy's DeviceMesh: which ranks read different samples.

``ModelParallelStrategy`` (and any strategy with a ``device_mesh``) puts ranks side by side that must
train on the same batch (tensor, context, pipeline parallel). Only the data-parallel dims of its mesh
choose samples; ``data_parallel_mesh`` finds them by name, once, at the edge, and the DataModule passes
the sub-mesh to its datasets. Strategies without a mesh (DDP, FSDP, DeepSpeed) make every rank a
data-parallel rank, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stream_plugin.errors import ConfigError

# Names that mean "reads different samples": Lightning's ModelParallelStrategy ("data_parallel"),
# torchtitan ("dp", "dp_replicate", "dp_shard") and Composer ("data_parallel_replicate",
# "data_parallel_shard"). Tensor, context, pipeline and expert dims are left out: they replicate.
DATA_PARALLEL_DIM_NAMES: tuple[str, ...] = (
    "data_parallel",
    "data_parallel_replicate",
    "data_parallel_shard",
    "dp",
    "dp_replicate",
    "dp_shard",
)


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


def data_parallel_dims(dim_names: Sequence[str], chosen: Sequence[str] | None) -> tuple[str, ...]:
    """The mesh dims that read different samples: ``chosen``, or the recognised names, in mesh order."""
    if chosen is not None:
        unknown = [name for name in chosen if name not in dim_names]
        if unknown or not chosen:
            raise ConfigError(
                f"data_parallel_dims: expected names of the strategy's device mesh dims {list(dim_names)}, "
                f"found {list(chosen)}; pass the dims whose ranks read different samples"
            )
        return tuple(name for name in dim_names if name in chosen)
    found = tuple(name for name in dim_names if name in DATA_PARALLEL_DIM_NAMES)
    if not found:
        raise ConfigError(
            f"StreamingDataModule: expected a data-parallel dim in the strategy's device mesh (one of "
            f"{list(DATA_PARALLEL_DIM_NAMES)}), found dims {list(dim_names)}; pass "
            "data_parallel_dims=[...] with the names of the dims whose ranks read different samples"
        )
    return found


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
    names = tuple(mesh.mesh_dim_names or ())
    if not names:
        raise ConfigError(
            f"StreamingDataModule: expected a device mesh with named dims, found an unnamed {mesh.ndim}-d mesh "
            "on the strategy; build it with init_device_mesh(..., mesh_dim_names=(...))"
        )
    dims = data_parallel_dims(names, chosen)
    sub_mesh = mesh[dims[0]] if len(dims) == 1 else mesh[dims]
    return DataParallelMesh(mesh=sub_mesh, dims=dims, size=int(sub_mesh.size()))
