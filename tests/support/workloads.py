"""The simulator's ``Workload`` of datasets written on disk, read from their ``index.json`` files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from stream_plugin.cache.eviction import footprint
from stream_plugin.format.index import parse_index
from stream_plugin.reading.config import DatasetConfig
from stream_plugin.simulate import Workload


def workload_of(folders: Sequence[Path], config: DatasetConfig, *, keep_zip: bool = False) -> Workload:
    """One stream per folder, its shards as the index lists them (sizes, files, samples)."""
    entries = []
    shards_per_stream = []
    for folder in folders:
        stream = parse_index((folder / "index.json").read_bytes(), source=str(folder / "index.json"))
        entries += stream
        shards_per_stream.append(len(stream))

    def per_shard(values: list[int]) -> np.ndarray:
        return np.array(values, dtype=np.int64)

    return Workload(
        samples_per_shard=per_shard([entry.samples for entry in entries]),
        stored_bytes=per_shard(
            [sum((stored or raw).bytes for raw, stored in entry.file_pairs()) for entry in entries]
        ),
        raw_bytes=per_shard([sum(raw.bytes for raw, _ in entry.file_pairs()) for entry in entries]),
        footprint=per_shard([footprint(entry, keep_zip=keep_zip) for entry in entries]),
        requests_per_shard=per_shard([len(entry.file_pairs()) for entry in entries]),
        shards_per_stream=tuple(shards_per_stream),
        config=config,
    )
