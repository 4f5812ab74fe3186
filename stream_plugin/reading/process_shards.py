"""This process's readers of a dataset's shards: opened on first use, never pickled.

A ``ProcessShards`` travels with the dataset to DataLoader workers as a description only (the opened
streams and their shard table); each process opens its own ``ShardAccess`` the first time it reads.
The process that opened the streams reuses their object stores (a new S3 client costs tens of ms).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from stream_plugin.cache.start_stagger import stagger_delay
from stream_plugin.format.read_options import DEFAULT_READ_OPTIONS, ReadOptions
from stream_plugin.reading.shard_access import ShardAccess
from stream_plugin.reading.shard_table import ShardTable
from stream_plugin.reading.sources import OpenedStreams, check_cache_limit, readers_within_limit
from stream_plugin.reading.world import World, detect_worker
from stream_plugin.storage import ObjectStore

READERS_UNDER_LIMIT = 2  # open shards per process at the smallest workable cache_limit
# Without a limit an open shard costs one memory map (no descriptor); stay far below vm.max_map_count.
READERS_WITHOUT_LIMIT = 8192


def check_readers_fit(opened: OpenedStreams, cache_limit: int | None, world: World, num_workers: int) -> None:
    """Refuse a ``cache_limit`` too small for every reader on this node (ranks x workers)."""
    readers = world.local_world_size * max(1, num_workers)
    check_cache_limit(opened, cache_limit, readers=readers, shards_per_reader=READERS_UNDER_LIMIT + 1)


class ProcessShards:
    """One process's ``ShardAccess`` to the shards of ``opened`` (numbered by ``shards``)."""

    def __init__(
        self,
        opened: OpenedStreams,
        shards: ShardTable,
        world: World,
        *,
        allow_unsafe_types: bool,
        read_options: ReadOptions = DEFAULT_READ_OPTIONS,
        stores: Sequence[ObjectStore | None] | None,
        start_stagger: float = 0.0,
        first_shards: int | None = None,
    ) -> None:
        self._opened = opened
        self._shards = shards
        self._world = world
        self._allow_unsafe_types = allow_unsafe_types
        self._read_options = read_options
        # This node's hold on each process's first shard downloads (``start_stagger``).
        self._start_delay = stagger_delay(world.node, world.num_nodes, start_stagger)
        self._first_shards = first_shards  # the node's cap on first-shard downloads (``cache.first_shards``)
        # Reused by the opening process's shard access only (never pickled: a worker opens its own).
        self._stores = stores
        self._stores_pid = os.getpid()
        self._access: ShardAccess | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_access"] = None
        state["_stores"] = None
        return state

    @property
    def opened_access(self) -> ShardAccess | None:
        """The access this process opened, or None before its first read."""
        return self._access

    def access(self) -> ShardAccess:
        """This process's access, opened on the first call."""
        if self._access is None:
            # Open readers pin their shards against eviction: keep as many as the limit holds for every
            # reader on the node (a shuffled pass changes shard at nearly every sample).
            max_open = readers_within_limit(
                self._opened,
                readers=self._world.local_world_size * max(1, detect_worker()[1]),
                in_flight=1,
                floor=READERS_UNDER_LIMIT,
                ceiling=READERS_WITHOUT_LIMIT,
            )
            self._access = ShardAccess(
                self._opened.cache_specs,
                self._opened.entries,
                self._shards,
                allow_unsafe_types=self._allow_unsafe_types,
                read_options=self._read_options,
                max_open=max_open,
                stores=self._stores if self._stores_pid == os.getpid() else None,
                start_delay=self._start_delay,
                first_shards=self._first_shards,
            )
        return self._access


__all__ = ["READERS_UNDER_LIMIT", "ProcessShards", "check_readers_fit"]
