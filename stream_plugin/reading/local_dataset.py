"""``LocalDataset``: a map-style PyTorch ``Dataset`` over shards already on disk (MosaicML's ``LocalDataset``).

No download, cache or sample order: ``len()``, ``dataset[i]`` (also negative ints, slices, lists and
ndarrays) and ``get_item`` (override it to transform samples), for a plain ``DataLoader`` with a sampler
of your choice. Each process opens the shards it reads on first use; nothing open is pickled.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from stream_plugin.format.index import ShardEntry, load_index
from stream_plugin.format.reader import ShardReader, open_shard
from stream_plugin.reading.dataset_compat import SampleCount
from stream_plugin.reading.sample_access import select_samples
from stream_plugin.reading.shard_table import ShardTable, Spanner
from stream_plugin.reading.sources import refuse_unsafe_columns


class LocalDataset(Dataset[Any]):
    """The samples of the dataset in ``local`` (or its ``split`` sub-folder), by global sample id.

    ``allow_unsafe_types`` (ours; MosaicML's has none and decodes ``pkl`` columns silently) must be
    True to open a dataset with ``pkl`` columns, whose decoding runs arbitrary code.
    """

    def __init__(
        self, local: str | os.PathLike[str], split: str | None = None, *, allow_unsafe_types: bool = False
    ):
        self.local = os.fspath(local)
        self.split = split or ""
        self.folder = os.path.join(self.local, self.split)
        self.shards: list[ShardEntry] = load_index(self.folder)
        self._table = ShardTable.from_counts([[entry.samples for entry in self.shards]])
        refuse_unsafe_columns(self.shards, allow_unsafe_types=allow_unsafe_types)
        self.allow_unsafe_types = allow_unsafe_types
        self._readers: dict[int, ShardReader] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_readers"] = {}
        return state

    @property
    def num_samples(self) -> int:
        return self._table.num_samples

    @property
    def size(self) -> SampleCount:
        """Number of samples (``size`` and ``size()`` both work)."""
        return SampleCount(self._table.num_samples)

    @property
    def spanner(self) -> Spanner:
        return Spanner(self._table)

    def __len__(self) -> int:
        return self._table.num_samples

    def get_item(self, sample_id: int) -> Any:
        """The sample with global id ``sample_id``; subclasses override this to transform samples."""
        shard_ids, offsets = self._table.locate(np.array([sample_id]))
        return self._reader(int(shard_ids[0])).read(int(offsets[0]))

    def __getitem__(self, at: Any) -> Any:
        return select_samples(at, self._table.num_samples, self.get_item)

    def close(self) -> None:
        """Close the shards this process opened (they reopen on the next read)."""
        while self._readers:
            _, reader = self._readers.popitem()
            reader.close()

    def _reader(self, shard_id: int) -> ShardReader:
        reader = self._readers.get(shard_id)
        if reader is None:
            reader = open_shard(
                self.shards[shard_id], self.folder, allow_unsafe_types=self.allow_unsafe_types
            )
            self._readers[shard_id] = reader
        return reader


__all__ = ["LocalDataset"]
