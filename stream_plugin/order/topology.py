"""The hardware layout as a plain value: nodes, ranks, DataLoader workers and replication groups.

The layout is detected once, at the edge (loader or integration), and passed explicitly into the
order maths. Nothing here reads the environment. The global sample order never depends on this
value; only which slice of it a given (rank, worker) reads does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stream_plugin.errors import ConfigError
from stream_plugin.order.data_parallel import DataParallelLayout


def _check_count(name: str, value: object, minimum: int, fix: str) -> int:
    # bool is an int subclass, but True as a node count is a bug at the call site.
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name}: expected an int >= {minimum}, found {value!r}; {fix}")
    return int(value)


@dataclass(frozen=True)
class Topology:
    """Where one reader sits in the training job.

    ``num_nodes`` hosts with ``ranks_per_node`` processes each; every rank runs ``workers_per_rank``
    DataLoader workers (``0`` means the main process reads, which behaves like one worker).
    ``replication`` consecutive ranks form a group that receives identical data (tensor or sequence
    parallelism). ``data_parallel``, when given, says instead which coordinate every rank reads (a
    DeviceMesh's data-parallel dims, wherever the replicas sit); ``replication`` is then its
    ``replication``. ``rank`` is the global rank, ``worker`` the DataLoader worker id within that rank.
    """

    num_nodes: int = 1
    ranks_per_node: int = 1
    workers_per_rank: int = 0
    replication: int = 1
    rank: int = 0
    worker: int = 0
    data_parallel: DataParallelLayout | None = None

    def __post_init__(self) -> None:
        checks = {
            "num_nodes": (1, "pass the number of hosts in the job"),
            "ranks_per_node": (1, "pass the number of processes per host"),
            "workers_per_rank": (0, "pass DataLoader num_workers (0 = main process)"),
            "replication": (1, "pass 1 unless ranks share data (tensor parallel)"),
            "rank": (0, "pass the global rank"),
            "worker": (0, "pass the DataLoader worker id (0 in the main process)"),
        }
        for name, (minimum, fix) in checks.items():
            # Store plain ints (numpy ints accepted) so the value hashes and prints cleanly.
            object.__setattr__(self, name, _check_count(name, getattr(self, name), minimum, fix))
        if self.data_parallel is not None and 0 <= self.rank < self.world_size:
            self._adopt_layout(self.data_parallel)
        if self.world_size % self.replication:
            raise ConfigError(
                f"replication: expected a divisor of world_size={self.world_size}, found {self.replication}; "
                "choose a replication group size that divides num_nodes * ranks_per_node"
            )
        if self.rank >= self.world_size:
            raise ConfigError(
                f"rank: expected 0 <= rank < world_size={self.world_size}, found {self.rank}; "
                "pass the global rank, not the local one, and check num_nodes / ranks_per_node"
            )
        if self.worker >= self.num_workers:
            raise ConfigError(
                f"worker: expected 0 <= worker < {self.num_workers} (workers_per_rank={self.workers_per_rank}), "
                f"found {self.worker}; pass the DataLoader worker id"
            )

    def _adopt_layout(self, layout: DataParallelLayout) -> None:
        if layout.world_size != self.world_size:
            raise ConfigError(
                f"data_parallel: expected a layout of world_size={self.world_size} ranks, found one of "
                f"{layout.world_size}; build it for this job's ranks"
            )
        if self.replication not in (1, layout.replication):
            raise ConfigError(
                f"replication: expected {layout.replication} (world_size / data_parallel size) or 1 beside a "
                f"data-parallel layout, found {self.replication}; leave replication out"
            )
        object.__setattr__(self, "replication", layout.replication)
        layout.coordinate(self.rank)  # this rank's own coordinate must be known

    @property
    def world_size(self) -> int:
        """Number of ranks in the job."""
        return self.num_nodes * self.ranks_per_node

    @property
    def num_workers(self) -> int:
        """Readers per rank: ``workers_per_rank``, where 0 (main process) counts as one."""
        return max(1, self.workers_per_rank)

    @property
    def node(self) -> int:
        """The host this rank runs on."""
        return self.rank // self.ranks_per_node

    @property
    def local_rank(self) -> int:
        """This rank's index on its host."""
        return self.rank % self.ranks_per_node

    @property
    def data_parallel_size(self) -> int:
        """Number of distinct data streams: ranks in one replication group read the same data."""
        return self.world_size // self.replication

    @property
    def data_parallel_rank(self) -> int:
        """Which distinct data stream this rank reads."""
        if self.data_parallel is not None:
            return self.data_parallel.coordinate(self.rank)
        return self.rank // self.replication

    @property
    def layout(self) -> DataParallelLayout:
        """The coordinate of every rank: the given layout, else ``replication`` consecutive ranks."""
        if self.data_parallel is not None:
            return self.data_parallel
        return DataParallelLayout.consecutive(self.world_size, self.replication)

    def with_position(self, rank: int, worker: int = 0) -> Topology:
        """The same layout seen from another (rank, worker); handy for sweeping a whole job."""
        return Topology(
            num_nodes=self.num_nodes,
            ranks_per_node=self.ranks_per_node,
            workers_per_rank=self.workers_per_rank,
            replication=self.replication,
            rank=rank,
            worker=worker,
            data_parallel=self.data_parallel,
        )
