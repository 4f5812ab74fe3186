"""Where every sample lives: global sample id -> (shard, index in shard), vectorised.

Shards of all streams are numbered globally in stream order, and samples likewise; the attributes
mirror the inspection attributes MosaicML Streaming users know (``samples_per_shard``, ``spanner``...).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stream_plugin.errors import ConfigError


@dataclass(frozen=True)
class ShardTable:
    samples_per_shard: np.ndarray  # int64 (num_shards,)
    stream_per_shard: np.ndarray  # int64 (num_shards,)
    shards_per_stream: np.ndarray  # int64 (num_streams,)
    shard_offset_per_stream: np.ndarray  # int64 (num_streams,): first global shard id of each stream
    samples_per_stream: np.ndarray  # int64 (num_streams,)
    sample_offset_per_stream: np.ndarray  # int64 (num_streams,): first global sample id of each stream
    sample_offset_per_shard: np.ndarray  # int64 (num_shards + 1,): first global sample id of each shard

    @classmethod
    def from_counts(cls, samples_per_shard_per_stream: Sequence[Sequence[int] | np.ndarray]) -> ShardTable:
        """Build the table from each stream's per-shard sample counts (as its index lists them)."""
        shards_per_stream = np.array([len(counts) for counts in samples_per_shard_per_stream], np.int64)
        samples_per_shard = np.concatenate(
            [np.zeros(0, np.int64)] + [np.asarray(counts, np.int64) for counts in samples_per_shard_per_stream]
        )
        stream_per_shard = np.repeat(np.arange(len(shards_per_stream), dtype=np.int64), shards_per_stream)
        shard_offset_per_stream = np.concatenate([[0], np.cumsum(shards_per_stream)[:-1]]).astype(np.int64)
        samples_per_stream = np.array(
            [np.asarray(counts, np.int64).sum() for counts in samples_per_shard_per_stream], np.int64
        )
        sample_offset_per_stream = np.concatenate([[0], np.cumsum(samples_per_stream)[:-1]]).astype(np.int64)
        sample_offset_per_shard = np.concatenate([[0], np.cumsum(samples_per_shard)]).astype(np.int64)
        return cls(
            samples_per_shard=samples_per_shard,
            stream_per_shard=stream_per_shard,
            shards_per_stream=shards_per_stream,
            shard_offset_per_stream=shard_offset_per_stream,
            samples_per_stream=samples_per_stream,
            sample_offset_per_stream=sample_offset_per_stream,
            sample_offset_per_shard=sample_offset_per_shard,
        )

    @property
    def num_samples(self) -> int:
        return int(self.sample_offset_per_shard[-1])

    @property
    def num_shards(self) -> int:
        return len(self.samples_per_shard)

    def locate(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(shard_ids, index_in_shard)`` for an array of global sample ids; empty shards are skipped."""
        ids = np.asarray(sample_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_samples):
            bad = ids[(ids < 0) | (ids >= self.num_samples)][0]
            raise IndexError(
                f"sample id {int(bad)} is out of range: expected 0 <= id < {self.num_samples} (the dataset size)"
            )
        # side="right" then -1 picks the last shard starting at or before the id, so empty shards
        # (which share their start with the next shard) are never chosen.
        shard_ids = np.searchsorted(self.sample_offset_per_shard, ids, side="right") - 1
        return shard_ids, ids - self.sample_offset_per_shard[shard_ids]


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
