"""Which data-parallel coordinate every rank reads, detected once at the edge (the dataset's construction).

Three ways to say it, as launchers do:

- ``data_parallel_mesh``: a ``torch.distributed`` DeviceMesh of the dims that read different samples
  (``mesh["dp"]``, ``mesh["dp_replicate", "dp_shard"]``); a rank's coordinate is its place in that
  mesh, flattened row-major. The other dims of the job replicate, in any order.
- ``data_parallel_rank`` and ``data_parallel_size``: Megatron-style process groups.
- ``replication``: MosaicML's, ``replication`` consecutive ranks per coordinate.

The mesh and the int forms learn every rank's coordinate in one all-reduce over the default process
group (the node's cache forecast and exact evaluation need the others'), so every rank must build the
dataset, as MosaicML's constructor (which holds barriers) also requires. Without a process group only
this rank's coordinate is known.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stream_plugin.collectives import distributed, gather_per_rank
from stream_plugin.errors import ConfigError, ConfigTypeError, check_int
from stream_plugin.order.data_parallel import (
    UNKNOWN,
    DataParallelLayout,
    agree_with_replication,
    data_parallel_dims,
)
from stream_plugin.reading.world import World


def mesh_coordinates(mesh: Any) -> tuple[int, ...]:
    """The flattened coordinate in ``mesh`` (a DeviceMesh of data-parallel dims) of every global rank.

    One collective over the default process group: every rank calls it. A ConfigError, on every rank,
    when some rank is not in its mesh.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    if not isinstance(mesh, DeviceMesh):
        raise ConfigTypeError(
            f"data_parallel_mesh: expected a torch.distributed.device_mesh.DeviceMesh of the data-parallel "
            f"dims (e.g. mesh['dp']), found {type(mesh).__name__}; pass data_parallel_rank= and "
            "data_parallel_size= for process groups without a mesh"
        )
    if not (dist.is_available() and dist.is_initialized()):
        raise ConfigError(
            "data_parallel_mesh: expected an initialised torch.distributed process group (a DeviceMesh needs "
            "one), found none; call torch.distributed.init_process_group (or init_device_mesh) first"
        )
    coordinate = mesh.get_coordinate()
    flat = UNKNOWN if coordinate is None else int(np.ravel_multi_index(tuple(coordinate), tuple(mesh.shape)))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    coordinates = tuple(value[0] - 1 for value in gather_per_rank([flat + 1], rank, world_size))  # 0: not in
    missing = [r for r, value in enumerate(coordinates) if value == UNKNOWN]
    if missing:
        raise ConfigError(
            f"data_parallel_mesh: expected a mesh that contains every rank (each rank passes its own "
            f"mesh['dp'] sub-mesh), found ranks {missing} outside theirs; slice the data-parallel dims of the "
            "job's whole mesh on every rank"
        )
    return coordinates


def data_parallel_submesh(mesh: Any, chosen: Sequence[str] | None = None, *, where: str = "the device mesh") -> Any:
    """The sub-mesh of ``mesh``'s data-parallel dims (``order.data_parallel.data_parallel_dims``: ``chosen``,
    else the dims named as data-parallel ones), to pass as ``data_parallel_mesh``."""
    names = tuple(mesh.mesh_dim_names or ())
    if not names:
        raise ConfigError(
            f"data-parallel dims: expected {where} with named dims, found an unnamed {mesh.ndim}-d mesh; build it "
            "with init_device_mesh(..., mesh_dim_names=(...))"
        )
    dims = data_parallel_dims(names, chosen, where=where)
    return mesh[dims[0]] if len(dims) == 1 else mesh[dims]


def _check_ints(rank: object, size: object, world_size: int) -> tuple[int, int]:
    if (rank is None) != (size is None):
        given, missing = ("data_parallel_rank", "data_parallel_size") if size is None else (
            "data_parallel_size",
            "data_parallel_rank",
        )
        raise ConfigError(
            f"{missing}: expected it beside {given}, found only {given}; pass both (e.g. Megatron's "
            "get_data_parallel_rank() and get_data_parallel_world_size())"
        )
    divisors = [d for d in range(1, world_size + 1) if world_size % d == 0]
    size = check_int("data_parallel_size", size, minimum=1, fix=f"pass one of {divisors}")
    if world_size % size:
        raise ConfigError(
            f"data_parallel_size: expected a divisor of the world size {world_size}, found {size}; pass one "
            f"of {divisors}"
        )
    rank = check_int(
        "data_parallel_rank",
        rank,
        minimum=0,
        maximum=size - 1,
        fix=f"pass this rank's index among the {size} data-parallel ranks",
    )
    return rank, size


def resolve_data_parallel(
    world: World,
    *,
    replication: int | None,
    mesh: Any = None,
    rank: int | None = None,
    size: int | None = None,
) -> DataParallelLayout:
    """The layout the arguments describe for ``world`` (see the module docstring), checked."""
    if mesh is None and rank is None and size is None:
        return DataParallelLayout.consecutive(world.world_size, replication or 1)
    if mesh is not None:
        coordinates = mesh_coordinates(mesh)
        if len(coordinates) != world.world_size:
            raise ConfigError(
                f"data_parallel_mesh: expected the process group of the dataset's world ({world.world_size} "
                f"ranks), found {len(coordinates)} ranks in torch.distributed; build the dataset in the "
                "launched processes, or pass a world that matches"
            )
        layout = DataParallelLayout(size=int(mesh.size()), coordinates=coordinates)
        if rank is not None or size is not None:
            own = (layout.coordinate(world.rank), layout.size)
            if (rank, size) != own:
                raise ConfigError(
                    f"data_parallel_rank / data_parallel_size: expected {own[0]} / {own[1]} (this rank's place in "
                    f"data_parallel_mesh), found {rank} / {size}; pass either the mesh or the ints"
                )
        given = "data_parallel_mesh"
    else:
        own_rank, own_size = _check_ints(rank, size, world.world_size)
        if distributed() and _group_size() == world.world_size:
            gathered = gather_per_rank([own_rank, own_size], world.rank, world.world_size)
            sizes = sorted({value[1] for value in gathered})
            if len(sizes) > 1:
                raise ConfigError(
                    f"data_parallel_size: expected the same value on every rank, found {sizes}; pass the size "
                    "of the data-parallel group on every rank"
                )
            coordinates = tuple(value[0] for value in gathered)
        else:  # no process group: only this rank's own coordinate is known
            coordinates = tuple(own_rank if r == world.rank else UNKNOWN for r in range(world.world_size))
        layout = DataParallelLayout(size=own_size, coordinates=coordinates)
        given = "data_parallel_rank / data_parallel_size"
    agree_with_replication(layout, replication, given)
    return layout


def _group_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size()


__all__ = ["data_parallel_submesh", "mesh_coordinates", "resolve_data_parallel"]
