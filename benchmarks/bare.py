"""The practical ceiling: a bare ``IterableDataset`` that slices samples out of memory-mapped MDS files.

No cache, no locks, no prefetch, no order maths beyond one permutation: it maps every shard of a local
MDS dataset, parses each offset table once, and decodes ``{"id": int, "data": bytes}`` with two slices
per sample. DataLoader workers take every W-th batch, as the streaming libraries do.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

_LENGTH = struct.Struct("<I")
_ID = struct.Struct("<q")


class BareMDSDataset(IterableDataset):
    """Samples ``{"id", "data"}`` of a local MDS dataset written with ``workloads.COLUMNS``."""

    def __init__(self, folder: str, *, batch_size: int, shuffle: bool, seed: int = 0) -> None:
        super().__init__()
        self.folder = folder
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        shards = json.loads((Path(folder) / "index.json").read_text())["shards"]
        self.basenames = [shard["raw_data"]["basename"] for shard in shards]
        self.samples_per_shard = np.array([shard["samples"] for shard in shards], np.int64)

    def __len__(self) -> int:
        return int(self.samples_per_shard.sum())

    def _my_sample_ids(self) -> np.ndarray:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        total = len(self)
        ids = np.random.default_rng(self.seed).permutation(total) if self.shuffle else np.arange(total)
        batch_starts = np.arange(worker * self.batch_size, total, workers * self.batch_size)  # (n,)
        mine = batch_starts[:, None] + np.arange(self.batch_size)  # (n, B)
        return ids[mine[mine < total]]

    def __iter__(self) -> Iterator[dict[str, object]]:
        maps, offsets = [], []
        for basename in self.basenames:
            with open(Path(self.folder) / basename, "rb") as file:
                view = memoryview(mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ))
            count = _LENGTH.unpack_from(view, 0)[0]
            offsets.append(np.frombuffer(view, np.uint32, count + 1, 4).tolist())
            maps.append(view)
        shard_ends = np.cumsum(self.samples_per_shard)
        sample_ids = self._my_sample_ids()
        shard_ids = np.searchsorted(shard_ends, sample_ids, side="right")
        within = sample_ids - (shard_ends - self.samples_per_shard)[shard_ids]
        for shard, index in zip(shard_ids.tolist(), within.tolist()):
            view, begin = maps[shard], offsets[shard][index]
            size = _LENGTH.unpack_from(view, begin)[0]
            data_end = begin + 4 + size
            yield {"data": bytes(view[begin + 4 : data_end]), "id": _ID.unpack_from(view, data_end)[0]}
