"""Names MosaicML Streaming 0.13 users call on a dataset, and the checks its constructor makes.

``MosaicNames`` is a mixin of ``StreamingDataset``: its settings (``shuffle_seed``, ``predownload``...),
the inspection attributes (``samples_per_shard``, ``spanner``, ``size``, a property that can also be
called...) and the cache methods (``cache_usage``, ``evict_shard``, ``evict_coldest_shard``), all read
from the dataset's public ``config`` and ``plan``. The functions below are construction-time checks
kept out of the dataset's own module.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from stream_plugin.cache.eviction import bytes_present
from stream_plugin.errors import ConfigError, check_int
from stream_plugin.format.index import INDEX_BASENAME, ShardEntry
from stream_plugin.order.shuffle import canonical_shuffle_name
from stream_plugin.reading.config import DatasetConfig
from stream_plugin.reading.dataset_plan import DatasetPlan
from stream_plugin.reading.shard_access import ShardAccess
from stream_plugin.reading.shard_table import ShardTable, Spanner
from stream_plugin.reading.stream import Stream


class SampleCount(int):
    """An int that can also be called: ``dataset.size`` (MosaicML 0.13) and ``dataset.size()`` (its FAQ)."""

    def __call__(self) -> int:
        return int(self)


class MosaicNames:
    """MosaicML's settings, inspection and cache names, on the dataset's config, plan and shard access."""

    streams: list[Stream]

    @property
    def config(self) -> DatasetConfig:
        raise NotImplementedError

    @property
    def plan(self) -> DatasetPlan:
        raise NotImplementedError

    def _shard_access(self) -> ShardAccess:
        raise NotImplementedError

    # ------------------------------------------------------------------ settings (frozen, read from the config)
    @property
    def batch_size(self) -> int | None:
        """The per-device batch size (None until given: to the dataset, or by a loader's ``bind_loader``)."""
        return self.config.batch_size

    @property
    def drop_last(self) -> bool:
        """Whether every epoch drops its partial last global batch (a loader's, see ``bind_loader``)."""
        return self.config.drop_last

    @property
    def predownload(self) -> int | None:
        return self.config.predownload

    @property
    def cache_limit(self) -> int | None:
        return self.config.cache_limit

    @property
    def replication(self) -> int:
        """Consecutive ranks that read the same samples (1: none)."""
        return self.config.replication or 1

    @property
    def num_canonical_nodes(self) -> int | None:
        """The caller's ``num_canonical_nodes`` (None: a checkpoint's, else the number of nodes)."""
        return self.config.num_canonical_nodes

    @property
    def shuffle(self) -> bool:
        return self.config.shuffle

    @property
    def shuffle_algo(self) -> str:
        return self.config.shuffle_algo

    @property
    def shuffle_seed(self) -> int:
        return self.config.shuffle_seed

    @property
    def shuffle_block_size(self) -> int | None:
        return self.config.shuffle_block_size

    @property
    def batching_method(self) -> str:
        return self.config.batching_method

    @property
    def sampling_method(self) -> str:
        return self.config.sampling_method

    @property
    def sampling_granularity(self) -> int:
        return self.config.sampling_granularity

    @property
    def partition_algo(self) -> str:
        return self.config.partition_algo

    @property
    def allow_unsafe_types(self) -> bool:
        return self.config.allow_unsafe_types

    # ------------------------------------------------------------------ shape and inspection (read-only views)
    @property
    def epoch_size(self) -> int:
        """Samples per epoch over all devices, after up- and down-sampling (before padding)."""
        return self.plan.planner.epoch_size

    @property
    def num_samples(self) -> int:
        return self.plan.table.num_samples

    @property
    def size(self) -> SampleCount:
        """Number of unique samples in the underlying streams (``size`` and ``size()`` both work)."""
        return SampleCount(self.plan.table.num_samples)

    @property
    def length(self) -> int:
        """MosaicML's name for ``len(dataset)``: samples this device yields per epoch."""
        return len(self)  # type: ignore[arg-type]

    @property
    def num_streams(self) -> int:
        return len(self.streams)

    @property
    def num_shards(self) -> int:
        """Number of shards over every stream."""
        return self.plan.table.num_shards

    @property
    def stream_per_shard(self) -> np.ndarray:
        return _read_only(self.plan.table.stream_per_shard)

    @property
    def shards_per_stream(self) -> np.ndarray:
        return _read_only(self.plan.table.shards_per_stream)

    @property
    def samples_per_shard(self) -> np.ndarray:
        return _read_only(self.plan.table.samples_per_shard)

    @property
    def samples_per_stream(self) -> np.ndarray:
        return _read_only(self.plan.table.samples_per_stream)

    @property
    def sample_offset_per_shard(self) -> np.ndarray:
        """The first global sample id of each shard: ``(num_shards,)``, as MosaicML's."""
        return _read_only(self.plan.table.sample_offset_per_shard[:-1])

    @property
    def sample_offset_per_stream(self) -> np.ndarray:
        """The first global sample id of each stream: ``(num_streams,)``, as MosaicML's."""
        return _read_only(self.plan.table.sample_offset_per_stream)

    @property
    def shard_offset_per_stream(self) -> np.ndarray:
        return _read_only(self.plan.table.shard_offset_per_stream)

    @property
    def spanner(self) -> Spanner:
        return Spanner(self.plan.table)

    @property
    def shards(self) -> list[ShardEntry]:
        return list(self.plan.opened.entries)

    # ------------------------------------------------------------------ cache
    @property
    def cache_usage(self) -> int:
        """Bytes this dataset's files (index files and shards, raw and compressed) occupy on this node."""
        access = self._shard_access()
        total = 0
        for stream, shard_ids in zip(self.streams, _shard_ids_per_stream(self.plan.table)):
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
        for stream, shard_ids in zip(self.streams, _shard_ids_per_stream(self.plan.table)):
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


def _read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view of one of the dataset's own tables: writing to an inspection attribute must not
    change which samples the dataset reads (and some are views of the node's mapped index anyway)."""
    view = array.view()
    view.flags.writeable = False
    return view


def _shard_ids_per_stream(table: ShardTable) -> list[list[int]]:
    return [
        list(range(int(first), int(first) + int(count)))
        for first, count in zip(table.shard_offset_per_stream, table.shards_per_stream)
    ]


def check_batch_size_in_workers(batch_size: int | None, num_workers: int) -> None:
    """DataLoader workers build whole device batches, so they need the per-device batch size."""
    if num_workers and batch_size is None:
        raise ConfigError(
            f"StreamingDataset.batch_size: expected the per-device batch size when a DataLoader runs "
            f"{num_workers} worker(s), found None; pass batch_size= to the dataset (the DataLoader's), or "
            "use StreamingDataLoader, which sets it"
        )


_WARNED_SHUFFLE_BLOCK: set[tuple[int, int]] = set()  # (block size, largest shard) already warned of


def warn_small_shuffle_block(config: DatasetConfig, samples_per_shard: np.ndarray) -> None:
    """MosaicML's warning, once per process and setting: a block shuffle whose block is smaller than a
    shard mixes samples within fewer shards than one block should."""
    block = config.shuffle_block_size
    if not config.shuffle or block is None or canonical_shuffle_name(config.shuffle_algo) != "block":
        return
    largest = int(np.max(samples_per_shard, initial=0))
    if block >= largest or (block, largest) in _WARNED_SHUFFLE_BLOCK:
        return
    _WARNED_SHUFFLE_BLOCK.add((block, largest))
    warnings.warn(
        f"shuffle_block_size: expected at least the {largest} samples of the largest shard for "
        f"shuffle_algo={config.shuffle_algo!r}, found {block}: Shuffle block size was smaller than shard size, "
        "so each block draws from part of one shard and the shuffle is weaker; raise shuffle_block_size",
        UserWarning,
        stacklevel=3,
    )


__all__ = [
    "MosaicNames",
    "SampleCount",
    "warn_small_shuffle_block",
    "check_batch_size_in_workers",
]
