"""Which ranks read different samples: the data-parallel coordinate of every global rank, as a value.

Tensor, context and pipeline parallel ranks must receive the same batch; only the data-parallel
coordinate chooses samples. ``replication=k`` (MosaicML's meaning) says the k consecutive ranks
``k*d .. k*d + k - 1`` share coordinate ``d``; a DeviceMesh can put replicas anywhere (``(dp, tp)``
with tp outermost, pipeline stages on other nodes). This value holds the coordinate of each global
rank, whatever the layout, so the order maths, the node's cache forecast and exact evaluation all read
the same thing. Nothing here reads the environment; ``reading.data_parallel`` detects it at the edge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stream_plugin.errors import ConfigError

# The names frameworks give the dims that read different samples: Lightning's ModelParallelStrategy
# ("data_parallel"), Composer ("data_parallel_replicate", "data_parallel_shard") and torchtitan ("dp",
# "dp_replicate", "dp_shard"). Tensor, context, pipeline and expert dims are left out: they replicate.
DATA_PARALLEL_DIM_NAMES: tuple[str, ...] = (
    "data_parallel",
    "data_parallel_replicate",
    "data_parallel_shard",
    "dp",
    "dp_replicate",
    "dp_shard",
)
UNKNOWN = -1  # a rank whose coordinate this process was not told (the int form without a process group)


@dataclass(frozen=True)
class DataParallelLayout:
    """``size`` data-parallel coordinates over ``len(coordinates)`` global ranks.

    ``coordinates[r]`` is the coordinate global rank ``r`` reads, or ``UNKNOWN``. Every coordinate in
    ``[0, size)`` is read by the same number of ranks (``replication``): its replicas.
    """

    size: int
    coordinates: tuple[int, ...]  # (world_size,)

    def __post_init__(self) -> None:
        world_size = len(self.coordinates)
        if isinstance(self.size, bool) or not isinstance(self.size, (int, np.integer)) or self.size < 1:
            raise ConfigError(
                f"data_parallel_size: expected an int >= 1, found {self.size!r}; pass the number of "
                "data-parallel ranks (ranks that read different samples)"
            )
        object.__setattr__(self, "size", int(self.size))
        if world_size == 0 or world_size % self.size:
            raise ConfigError(
                f"data_parallel_size: expected a divisor of the world size {world_size}, found {self.size}; "
                f"choose one of {[size for size in range(1, world_size + 1) if world_size % size == 0]}"
            )
        values = np.asarray(self.coordinates, dtype=np.int64)  # (world_size,)
        object.__setattr__(self, "coordinates", tuple(int(value) for value in values))
        bad = np.flatnonzero((values < UNKNOWN) | (values >= self.size))
        if len(bad):
            rank = int(bad[0])
            raise ConfigError(
                f"data_parallel_rank: expected 0 <= coordinate < data_parallel_size={self.size} on every rank, "
                f"found {values[rank]} on rank {rank}; pass each rank's index among the data-parallel ranks"
            )
        known = values[values != UNKNOWN]
        counts = np.bincount(known, minlength=self.size)  # (size,) ranks per coordinate
        if len(known) == world_size and (counts != self.replication).any():
            coordinate = int(np.flatnonzero(counts != self.replication)[0])
            raise ConfigError(
                f"data-parallel layout: expected each of the {self.size} coordinates on world_size / "
                f"data_parallel_size = {self.replication} ranks, found coordinate {coordinate} on "
                f"{counts[coordinate]} ranks ({np.flatnonzero(values == coordinate).tolist()}); give every "
                "rank its own data-parallel rank from the same mesh or process-group layout"
            )

    @classmethod
    def consecutive(cls, world_size: int, replication: int = 1) -> DataParallelLayout:
        """MosaicML's ``replication``: ranks ``k*d .. k*d + k - 1`` read coordinate ``d``."""
        if replication < 1 or world_size % replication:
            raise ConfigError(
                f"replication: expected a divisor of the world size {world_size}, found {replication}; "
                f"choose one of {[size for size in range(1, world_size + 1) if world_size % size == 0]}"
            )
        ranks = np.arange(world_size, dtype=np.int64)  # (world_size,)
        return cls(size=world_size // replication, coordinates=tuple((ranks // replication).tolist()))

    @classmethod
    def of_mesh(
        cls, shape: Sequence[int], names: Sequence[str], chosen: Sequence[str] | None = None
    ) -> DataParallelLayout:
        """The layout of a DeviceMesh of ``shape`` (dims ``names``) that global ranks fill row-major, as
        ``init_device_mesh`` lays them out, reading different samples along its data-parallel dims
        (``data_parallel_dims(names, chosen)``; their indices flattened row-major) and the same along
        the other dims."""
        if len(names) != len(shape):
            raise ConfigError(f"mesh: expected a size for each dim name, found sizes {list(shape)} for {list(names)}")
        dims = [list(names).index(name) for name in data_parallel_dims(names, chosen, where="the mesh")]
        ranks = np.arange(int(np.prod(shape)), dtype=np.int64)  # (world_size,)
        index = np.unravel_index(ranks, tuple(shape))  # per dim: (world_size,)
        sizes = [int(shape[d]) for d in dims]
        coordinates = np.ravel_multi_index([index[d] for d in dims], sizes)  # (world_size,)
        return cls(size=int(np.prod(sizes)), coordinates=tuple(coordinates.tolist()))

    @property
    def world_size(self) -> int:
        return len(self.coordinates)

    @property
    def replication(self) -> int:
        """Ranks that read each coordinate (its replicas)."""
        return self.world_size // self.size

    def coordinate(self, rank: int) -> int:
        """The coordinate ``rank`` reads; a ConfigError where it is unknown."""
        value = self.coordinates[rank]
        if value == UNKNOWN:
            raise ConfigError(
                f"data-parallel layout: expected the coordinate of rank {rank}, found it unknown (only this "
                "process's own is known without a process group); initialise torch.distributed before "
                "building the dataset, or pass data_parallel_mesh"
            )
        return value

    def is_consecutive(self) -> bool:
        """Whether this is ``replication`` consecutive ranks per coordinate (MosaicML's layout)."""
        return self == DataParallelLayout.consecutive(self.world_size, self.replication)

    def replica_index(self, rank: int) -> int | None:
        """``rank``'s place among the ranks that read its coordinate (by global rank), None if unknown."""
        values = np.asarray(self.coordinates)
        if (values == UNKNOWN).any():
            return None
        return int(np.count_nonzero(values[:rank] == values[rank]))

    def node_band(self, node: int, ranks_per_node: int) -> tuple[int, int] | None:
        """``(first, count)`` when the coordinates ``node``'s ranks read are exactly ``first ..
        first + count - 1``, with ``count`` dividing ``size`` and ``first`` a multiple of it: the node
        then reads one band of ``count * B`` columns of every global batch. None otherwise (or unknown)."""
        values = np.asarray(self.coordinates[node * ranks_per_node : (node + 1) * ranks_per_node])
        if (values == UNKNOWN).any():
            return None
        read = np.unique(values)  # sorted
        first, count = int(read[0]), len(read)
        if int(read[-1]) - first + 1 != count or self.size % count or first % count:
            return None
        return first, count


def data_parallel_dims(
    dim_names: Sequence[str], chosen: Sequence[str] | None = None, *, where: str = "the device mesh"
) -> tuple[str, ...]:
    """The dims of a mesh (``dim_names``, outermost first) that read different samples, in mesh order:
    ``chosen`` (checked), else those named as ``DATA_PARALLEL_DIM_NAMES``. ``where`` names the mesh in
    messages; the option that chooses is ``data_parallel_dims``."""
    if chosen is not None:
        unknown = [name for name in chosen if name not in dim_names]
        if unknown or not chosen:
            raise ConfigError(
                f"data_parallel_dims: expected names of {where} dims {list(dim_names)}, found {list(chosen)}; "
                "pass the dims whose ranks read different samples"
            )
        return tuple(name for name in dim_names if name in chosen)
    found = tuple(name for name in dim_names if name in DATA_PARALLEL_DIM_NAMES)
    if not found:
        raise ConfigError(
            f"data-parallel dims: expected a data-parallel dim in {where} (one of {list(DATA_PARALLEL_DIM_NAMES)}), "
            f"found dims {list(dim_names)}; pass data_parallel_dims=[...] with the names of the dims whose "
            "ranks read different samples"
        )
    return found


def agree_with_replication(layout: DataParallelLayout, replication: int | None, given: str) -> None:
    """A ConfigError unless ``replication`` (MosaicML's consecutive groups), when set, describes ``layout``."""
    if replication is None:
        return
    values = np.asarray(layout.coordinates)  # (world_size,)
    known = values != UNKNOWN
    consecutive = np.arange(layout.world_size) // replication  # (world_size,): replication's coordinates
    matches = layout.world_size == layout.size * replication and bool((values[known] == consecutive[known]).all())
    if not matches:
        raise ConfigError(
            f"replication: expected it to agree with {given} (data_parallel_size={layout.size}, "
            f"replicas {layout.replication} per coordinate"
            + (", on consecutive ranks" if layout.is_consecutive() else ", not on consecutive ranks")
            + f"), found replication={replication}, which groups ranks {list(range(min(replication, layout.world_size)))}"
            f" as one replica set; leave replication unset (None) when you pass {given}"
        )


__all__ = ["DATA_PARALLEL_DIM_NAMES", "UNKNOWN", "DataParallelLayout", "agree_with_replication", "data_parallel_dims"]
