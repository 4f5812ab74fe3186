"""The per-sample hot loop: turn a worker's global sample ids into decoded samples, in order.

Shard lookups are vectorised up front; the loop itself only switches readers when the shard changes.
Subclasses that override ``__getitem__`` or ``get_item`` are honoured (MosaicML's transform hook).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from stream_plugin.dataset import StreamingDataset


def _overrides(dataset: StreamingDataset, name: str) -> bool:
    from stream_plugin.dataset import StreamingDataset

    return getattr(type(dataset), name) is not getattr(StreamingDataset, name)


def read_samples(dataset: StreamingDataset, sample_ids: np.ndarray) -> Iterator[Any]:
    """Yield the samples ``sample_ids`` (global ids) in order, prefetching the shards they need."""
    if _overrides(dataset, "__getitem__") or _overrides(dataset, "get_item"):
        access = dataset._shard_access()
        with access.prefetch(sample_ids, predownload=dataset.predownload) as prefetch:
            for position, sample_id in enumerate(sample_ids.tolist()):
                prefetch.advance(position)
                yield dataset[sample_id]
        return
    access = dataset._shard_access()
    shard_ids, offsets = dataset._table.locate(sample_ids)
    with access.prefetch(sample_ids, predownload=dataset.predownload, shard_ids=shard_ids) as prefetch:
        current = -1
        read = None
        for position, (shard_id, offset) in enumerate(zip(shard_ids.tolist(), offsets.tolist())):
            if shard_id != current:
                prefetch.advance(position)
                read = access.reader(shard_id).read
                current = shard_id
            yield read(offset)  # type: ignore[misc]
