"""Per-device and global batch sizes: checked against the world once it is known.

The sample order is defined per *global* batch (one loader batch on every data-parallel rank), so
resuming on a different number of processes is exact only when the global batch size stays the same.
Configuring ``global_batch_size`` pins it; ``batch_size`` (per device) may then be left out and derived.
"""

from __future__ import annotations

from dataclasses import dataclass

from stream_plugin.errors import ConfigError
from stream_plugin_lightning.mesh import DataParallelMesh


def _divisors(number: int) -> list[int]:
    return [candidate for candidate in range(1, number + 1) if number % candidate == 0]


@dataclass(frozen=True)
class BatchSizes:
    """``per_device`` samples per loader batch on each rank; ``global_size`` over all data-parallel ranks."""

    per_device: int
    data_parallel_size: int

    @property
    def global_size(self) -> int:
        return self.per_device * self.data_parallel_size


def resolve_batch_sizes(
    batch_size: int | None,
    global_batch_size: int | None,
    world_size: int,
    replication: int = 1,
    mesh: DataParallelMesh | None = None,
) -> BatchSizes:
    """Derive or check the per-device batch size for ``world_size`` ranks, of which the data-parallel
    ``mesh`` dims (when the strategy has a mesh), else ``world_size / replication``, read different data."""
    if mesh is not None:
        ranks = mesh.size
        where = f"{ranks} data-parallel rank{'s' if ranks != 1 else ''} (device mesh dims {list(mesh.dims)}"
        where += f" of world size {world_size})"
    else:
        if world_size % replication:
            raise ConfigError(
                f"replication: expected a divisor of the world size {world_size}, found {replication}; "
                f"choose one of {_divisors(world_size)}"
            )
        ranks = world_size // replication
        where = f"{ranks} data-parallel rank{'s' if ranks != 1 else ''} (world size {world_size}" + (
            f" / replication {replication})" if replication != 1 else ")"
        )
    if batch_size is None and global_batch_size is None:
        raise ConfigError(
            "StreamingDataModule: expected batch_size (per device) or global_batch_size, found neither; "
            "pass global_batch_size to keep resumption exact on any number of processes"
        )
    if batch_size is None:
        assert global_batch_size is not None
        if global_batch_size % ranks:
            raise ConfigError(
                f"global_batch_size: expected a multiple of the {where}, found {global_batch_size}, which "
                f"does not split evenly; run on a data-parallel size in {_divisors(global_batch_size)} or "
                f"use a global batch size divisible by {ranks}"
            )
        return BatchSizes(per_device=global_batch_size // ranks, data_parallel_size=ranks)
    if global_batch_size is not None and batch_size * ranks != global_batch_size:
        hint = (
            f"set batch_size={global_batch_size // ranks} or leave batch_size unset to derive it"
            if global_batch_size % ranks == 0
            else f"run on a data-parallel size in {_divisors(global_batch_size)}"
        )
        raise ConfigError(
            f"batch_size: expected batch_size x {where} = global_batch_size={global_batch_size}, found "
            f"{batch_size} x {ranks} = {batch_size * ranks}; {hint}"
        )
    return BatchSizes(per_device=batch_size, data_parallel_size=ranks)
