"""Where every sample lives: global sample id -> (shard, index in shard), vectorised.

Shards of all streams are numbered globally in stream order, and samples likewise; the attributes
mirror the inspection attributes MosaicML Streaming users know (``samples_per_shard``, ``spanner``...).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from stream_plugin.errors import ConfigError
from stream_plugin.order.layout import DatasetShape
from stream_plugin.order.shard_lookup import ShardLookup


@dataclass(frozen=True)
class ShardTable:
    shape: DatasetShape  # every shard's sample count and stream, and the shard offsets (computed once)
    shards_per_stream: np.ndarray  # int64 (num_streams,)
    shard_offset_per_stream: np.ndarray  # int64 (num_streams,): first global shard id of each stream
    samples_per_stream: np.ndarray  # int64 (num_streams,)
    sample_offset_per_stream: np.ndarray  # int64 (num_streams,): first global sample id of each stream

    @classmethod
    def from_counts(cls, samples_per_shard_per_stream: Sequence[Sequence[int] | np.ndarray]) -> ShardTable:
        """Build the table from each stream's per-shard sample counts (as its index lists them).

        One stream's int64 counts are used as they are (a million-shard index's column is a view of
        the node's kept parse): only the shard offsets are a fresh array of the shards' size.
        """
        counts = [np.asarray(stream_counts, np.int64) for stream_counts in samples_per_shard_per_stream]
        shards_per_stream = np.array([len(stream_counts) for stream_counts in counts], np.int64)
        if len(counts) == 1:
            samples_per_shard = counts[0]
            stream_per_shard = np.zeros(len(samples_per_shard), np.int64)
        else:
            samples_per_shard = np.concatenate([np.zeros(0, np.int64), *counts])
            stream_per_shard = np.repeat(np.arange(len(shards_per_stream), dtype=np.int64), shards_per_stream)
        shape = DatasetShape(samples_per_shard=samples_per_shard, stream_of_shard=stream_per_shard)
        shard_edges = np.concatenate([[0], np.cumsum(shards_per_stream)]).astype(np.int64)  # (num_streams + 1,)
        sample_edges = shape.shard_offsets[shard_edges]  # (num_streams + 1,)
        return cls(
            shape=shape,
            shards_per_stream=shards_per_stream,
            shard_offset_per_stream=shard_edges[:-1],
            samples_per_stream=np.diff(sample_edges),
            sample_offset_per_stream=sample_edges[:-1],
        )

    @property
    def samples_per_shard(self) -> np.ndarray:
        """int64 (num_shards,)"""
        return self.shape.samples_per_shard

    @property
    def stream_per_shard(self) -> np.ndarray:
        """int64 (num_shards,)"""
        return self.shape.stream_of_shard

    @property
    def sample_offset_per_shard(self) -> np.ndarray:
        """int64 (num_shards + 1,): first global sample id of each shard."""
        return self.shape.shard_offsets

    @property
    def num_samples(self) -> int:
        return int(self.sample_offset_per_shard[-1])

    @property
    def num_shards(self) -> int:
        return len(self.samples_per_shard)

    @cached_property
    def _lookup(self) -> ShardLookup:
        return ShardLookup(self.sample_offset_per_shard)

    def locate(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(shard_ids, index_in_shard)`` for an array of global sample ids; empty shards are skipped."""
        ids = np.asarray(sample_ids, dtype=np.int64)
        shard_ids = self.shards_of(ids)
        return shard_ids, ids - self.sample_offset_per_shard[shard_ids]

    def shards_of(self, sample_ids: np.ndarray) -> np.ndarray:
        """``locate``'s shard ids alone (int64, shaped as ``sample_ids``): what the node's forecast needs of
        the tens of millions of ids it reads a pass."""
        ids = np.asarray(sample_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_samples):
            bad = ids[(ids < 0) | (ids >= self.num_samples)][0]
            raise IndexError(
                f"sample id {int(bad)} is out of range: expected 0 <= id < {self.num_samples} (the dataset "
                "size). Invalid sample index: pass an id in that range"
            )
        # The last shard starting at or before the id, so empty shards (which share their start with
        # the next shard) are never chosen: searchsorted(side="right") - 1, through a bucket table.
        return self._lookup.shards_of(ids)


class Spanner:
    """MosaicML's ``dataset.spanner``: ``spanner[global_sample_id] -> (shard_id, index_in_shard)``."""

    def __init__(self, table: ShardTable) -> None:
        self._table = table

    def __getitem__(self, sample_id: int) -> tuple[int, int]:
        if not isinstance(sample_id, (int, np.integer)):
            raise ConfigError(f"spanner: expected an int sample id, found {type(sample_id).__name__}")
        shard_ids, offsets = self._table.locate(np.array([sample_id]))
        return int(shard_ids[0]), int(offsets[0])

    def __len__(self) -> int:
        return self._table.num_samples
