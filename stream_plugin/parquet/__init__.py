"""Parquet datasets read in place: an index of their footers, and shards that are runs of row groups.

``index_parquet`` writes an ``index.json`` our reader opens as it opens an MDS one; a shard's cache
unit is its byte ranges (``download``), decoded a column chunk at a time (``decode``, ``reader``).
pyarrow is imported on first use: the reading side imports ``entries`` for every stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stream_plugin.lazy_names import imported_on_use

if TYPE_CHECKING:
    from stream_plugin.parquet.indexer import ParquetIndex, SchemaDriftError, index_parquet

__getattr__ = imported_on_use(
    __name__,
    {name: "stream_plugin.parquet.indexer" for name in ("ParquetIndex", "SchemaDriftError", "index_parquet")},
)

__all__ = ["ParquetIndex", "SchemaDriftError", "index_parquet"]
