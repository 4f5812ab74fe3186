"""A stream over a Parquet index: its entries as the stream reads them, and the store its cache uses.

The reading side calls ``parquet_view`` once per stream after opening its index: for an MDS stream it
returns None (and refuses ``columns=``); for a Parquet one, the view of the stream's columns (and, for
a local-only stream, the files read in place) plus the index's columns with the cached sizes of that
view. ``shard_store`` wraps the store a stream's cache is given in each process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from stream_plugin.cache.index_store import OpenedIndex
from stream_plugin.errors import ConfigError
from stream_plugin.parquet.download import ParquetShardStore
from stream_plugin.parquet.entries import ReadView, ViewedEntries
from stream_plugin.storage.base import ObjectStore


def parquet_view(
    index: OpenedIndex, *, columns: Sequence[str] | None, local_only: str | None, source: str
) -> tuple[OpenedIndex, ReadView] | None:
    """The stream's index as it reads it, and its view; None for a stream without Parquet shards."""
    formats = {index.entries[int(shard)].format for shard in index.columns.first_of_kind.tolist()}
    if "parquet" not in formats:
        if columns is not None:
            raise ConfigError(
                f"columns: expected a Parquet stream (an index written by index-parquet), found {source} "
                f"with {sorted(formats)} shards; drop columns=, or point the stream at a Parquet index"
            )
        return None
    view = ReadView(columns=None if columns is None else tuple(columns), local=local_only)
    if view.columns is None and view.local is None:
        return index, view
    entries = ViewedEntries(index.entries, view)
    if view.local is None:
        sizes = np.array([entry.raw_data.bytes for entry in entries], np.int64)  # (num_shards,)
        index = replace(index, columns=replace(index.columns, stored_bytes=sizes))
    else:
        entries[0]  # noqa: B018 - refuses now a local-only stream whose files are remote
    return replace(index, entries=entries), view


def shard_store(
    store: ObjectStore, local: str, view: ReadView, options: Mapping[str, Any]
) -> ObjectStore:
    """The store a Parquet stream's cache downloads through: shards become their byte ranges.

    A data source elsewhere (an index kept in a folder of the user's) is opened with the stream's
    ``storage_options`` when it has the index's scheme (one account), else with none (the environment's).
    """
    from stream_plugin.storage import open_store
    from stream_plugin.storage.registry import scheme_of

    def open_data(url: str) -> ObjectStore:
        same = scheme_of(url) == scheme_of(store.url)
        return open_store(url, **(dict(options) if same else {}))

    return ParquetShardStore(store, local, view, open_data)


__all__ = ["parquet_view", "shard_store"]
