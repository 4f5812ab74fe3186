"""Names MosaicML Streaming 0.13 users call on a dataset, and the checks its constructor makes.

``MosaicNames`` is a mixin of ``StreamingDataset``: ``num_shards``, ``size`` (a property that can also be
called), ``next_epoch``, ``cache_usage``, ``evict_shard`` and ``evict_coldest_shard``. The functions
below are construction-time checks and bookkeeping kept out of the dataset's own module.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from stream_plugin.cache.eviction import bytes_present
from stream_plugin.errors import ConfigError, check_int
from stream_plugin.format.index import INDEX_BASENAME
from stream_plugin.reading.cursor import EpochCursor
from stream_plugin.reading.shard_access import ShardAccess
from stream_plugin.reading.shard_table import ShardTable
from stream_plugin.reading.stream import Stream

PARTITION_ALGOS = ("orig", "relaxed")  # MosaicML's; both give our one partitioning


class SampleCount(int):
    """An int that can also be called: ``dataset.size`` (MosaicML 0.13) and ``dataset.size()`` (its FAQ)."""

    def __call__(self) -> int:
        return int(self)


class MosaicNames:
    """MosaicML's inspection and cache methods, on the dataset's table, cursor and shard access."""

    streams: list[Stream]
    _table: ShardTable
    _cursor: EpochCursor

    def _shard_access(self) -> ShardAccess:
        raise NotImplementedError

    @property
    def size(self) -> SampleCount:
        """Number of unique samples in the underlying streams (``size`` and ``size()`` both work)."""
        return SampleCount(self._table.num_samples)

    @property
    def num_shards(self) -> int:
        """Number of shards over every stream."""
        return self._table.num_shards

    @property
    def next_epoch(self) -> int:
        """The epoch the next pass runs (a loaded resume state's, else the one after the last begun)."""
        return self._cursor.next_epoch

    @next_epoch.setter
    def next_epoch(self, epoch: int) -> None:
        self._cursor.set_epoch(int(epoch))

    @property
    def cache_usage(self) -> int:
        """Bytes this dataset's files (index files and shards, raw and compressed) occupy on this node."""
        access = self._shard_access()
        total = 0
        for stream, shard_ids in zip(self.streams, _shard_ids_per_stream(self._table)):
            folder = Path(stream.local_dir)
            index = folder / INDEX_BASENAME
            total += index.stat().st_size if index.is_file() else 0
            total += sum(bytes_present(folder, access.entry(shard_id)) for shard_id in shard_ids)
        return total

    def evict_shard(self, shard_id: int) -> int:
        """Delete one shard's cached files now, unless a process on this node reads or downloads it
        (then nothing is freed). Returns the bytes freed. A shard of a stream with no remote is refused:
        its files are the only copy (MosaicML deletes them)."""
        check_int("shard_id", shard_id)
        if not 0 <= shard_id < self.num_shards:
            raise ConfigError(
                f"shard_id: expected 0 <= shard_id < {self.num_shards} (num_shards), found {shard_id}"
            )
        access = self._shard_access()
        access.release(int(shard_id))
        return access.cache_of(int(shard_id)).evict(access.entry(int(shard_id)))

    def evict_coldest_shard(self) -> int:
        """Evict the least recently used cached shard of the remote streams; returns the bytes freed."""
        access = self._shard_access()
        candidates: list[tuple[int, int]] = []  # (last use in ns, shard id): the coldest of each stream
        for stream, shard_ids in zip(self.streams, _shard_ids_per_stream(self._table)):
            if stream.remote_dir is None or not shard_ids:
                continue
            id_of = {access.entry(shard_id).raw_data.basename: shard_id for shard_id in shard_ids}
            for last_used, entry in access.cache_of(shard_ids[0]).present_by_age()[:1]:
                candidates.append((last_used, id_of[entry.raw_data.basename]))
        if not candidates:
            raise ConfigError(
                "evict_coldest_shard: expected a cached shard of a remote stream to evict, found none on this "
                "node; there is nothing to free (local-only streams are never evicted)"
            )
        return self.evict_shard(min(candidates)[1])


def _shard_ids_per_stream(table: ShardTable) -> list[list[int]]:
    return [
        list(range(int(first), int(first) + int(count)))
        for first, count in zip(table.shard_offset_per_stream, table.shards_per_stream)
    ]


def check_partition_algo(partition_algo: str) -> str:
    """MosaicML's ``partition_algo`` values are accepted; ours has one partitioning, so warn they are ignored."""
    if partition_algo not in PARTITION_ALGOS:
        raise ConfigError(
            f"partition_algo: expected one of {list(PARTITION_ALGOS)}, found {partition_algo!r}; leave it "
            "unset (the order contract in docs/order.md describes the one partitioning used)"
        )
    if partition_algo != "relaxed":
        warnings.warn(
            f"partition_algo={partition_algo!r} is accepted for compatibility and ignored: samples are "
            "partitioned as the order contract (docs/order.md) says, whatever the value",
            UserWarning,
            stacklevel=3,
        )
    return partition_algo


def check_canonical_nodes(epoch_size: int, num_canonical_nodes: int) -> None:
    """Refuse more canonical nodes than samples in an epoch (MosaicML only warns, then repeats samples)."""
    if num_canonical_nodes > epoch_size:
        raise ConfigError(
            f"num_canonical_nodes: expected at most {epoch_size} (the epoch's samples: each canonical node "
            f"needs at least one), found {num_canonical_nodes}; pass num_canonical_nodes={max(1, epoch_size)} "
            "or fewer, or a larger epoch_size"
        )


def check_batch_size_in_workers(batch_size: int | None, num_workers: int) -> None:
    """DataLoader workers build whole device batches, so they need the per-device batch size."""
    if num_workers and batch_size is None:
        raise ConfigError(
            f"StreamingDataset.batch_size: expected the per-device batch size when a DataLoader runs "
            f"{num_workers} worker(s), found None; pass batch_size= to the dataset (the DataLoader's), or "
            "use StreamingDataLoader, which sets it"
        )


def resolve_stream_weights(streams: Sequence[Stream], underlying: np.ndarray, chosen: np.ndarray) -> None:
    """Give each stream the proportion, repeat and choose the dataset derived, as MosaicML does."""
    total = sum(int(count) for count in chosen) or 1
    given = [stream.weight.proportion for stream in streams]
    relative = all(value is not None for value in given)
    given_total = sum(value for value in given if value is not None) or 1.0
    for stream, samples, choose, proportion in zip(streams, underlying.tolist(), chosen, given):
        stream.resolve_weights(
            proportion=proportion / given_total
            if relative and proportion is not None
            else int(choose) / total,
            repeat=int(choose) / samples if samples else 0.0,
            choose=int(choose),
        )


__all__ = [
    "MosaicNames",
    "PARTITION_ALGOS",
    "SampleCount",
    "check_batch_size_in_workers",
    "check_canonical_nodes",
    "check_partition_algo",
    "resolve_stream_weights",
]
