"""Where this process sits: nodes, ranks and DataLoader workers, detected once at the edge.

The sample-order maths never looks at the environment; it receives the value this module detects.
``torch.distributed`` wins when it is initialised; otherwise the launcher's environment variables
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, set by torchrun and the Composer
launcher) are used; a plain single process is rank 0 of 1.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from stream_plugin.errors import ConfigError, check_int


@dataclass(frozen=True)
class World:
    """The ranks of a job, without DataLoader workers."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    def __post_init__(self) -> None:
        for name in ("rank", "world_size", "local_rank", "local_world_size"):
            check_int(f"World.{name}", getattr(self, name))
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(
                f"rank: expected 0 <= rank < world_size={self.world_size}, found {self.rank}; check RANK and "
                "WORLD_SIZE (or the World passed to StreamingDataset)"
            )
        if self.local_world_size < 1 or self.world_size % self.local_world_size:
            raise ConfigError(
                f"local_world_size: expected a divisor of world_size={self.world_size} (ranks per node, the "
                f"same on every node), found {self.local_world_size}; check LOCAL_WORLD_SIZE"
            )

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.local_world_size

    @property
    def node(self) -> int:
        return self.rank // self.local_world_size


def _env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError as error:
        raise ConfigError(f"{name}: expected an integer environment variable, found {text!r}") from error


def detect_world(environ: Mapping[str, str] | None = None) -> World:
    """The current job's ranks, from ``torch.distributed`` if initialised, else from the environment."""
    env = os.environ if environ is None else environ
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
        world_size = dist.get_world_size()
    else:
        rank = _env_int(env, "RANK", 0)
        world_size = _env_int(env, "WORLD_SIZE", 1)
    # torch.distributed does not know the node layout; launchers export it. Without it, assume one node.
    local_world_size = _env_int(env, "LOCAL_WORLD_SIZE", world_size)
    local_rank = _env_int(env, "LOCAL_RANK", rank % local_world_size)
    return World(rank=rank, world_size=world_size, local_rank=local_rank, local_world_size=local_world_size)


def detect_worker() -> tuple[int, int]:
    """``(worker_id, num_workers)`` inside a DataLoader worker; ``(0, 0)`` in the main process."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    if info is None:
        return 0, 0
    return info.id, info.num_workers
