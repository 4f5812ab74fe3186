"""Where a shard's bytes lie in its Parquet file: the column chunks of its row groups and columns.

A shard is a run of whole row groups of one file; with ``columns=`` only those columns' chunks. The
cache keeps exactly these byte ranges (plus the footer) in one local file, in file order with no gaps:
``Segments`` maps a position in the original file onto the local copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stream_plugin.parquet.arrow import pa, pq


def leaf_count(arrow_type: pa.DataType) -> int:
    """How many Parquet leaf columns (column chunks) hold one Arrow field of this type."""
    if pa.types.is_struct(arrow_type):
        return sum(leaf_count(arrow_type.field(i).type) for i in range(arrow_type.num_fields)) or 1
    if pa.types.is_map(arrow_type):
        return leaf_count(arrow_type.key_type) + leaf_count(arrow_type.item_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return leaf_count(arrow_type.value_type)
    return 1


def leaves_per_column(schema: pa.Schema) -> dict[str, range]:
    """Each top-level column's leaf column indices (a contiguous run, in schema order)."""
    found: dict[str, range] = {}
    first = 0
    for field in schema:
        count = leaf_count(field.type)
        found[field.name] = range(first, first + count)
        first += count
    return found


def chunk_range(chunk: pq.ColumnChunkMetaData) -> tuple[int, int]:
    """``[start, end)`` of one column chunk in its file: the dictionary page (if any) and the data pages."""
    start = chunk.data_page_offset
    if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
        start = chunk.dictionary_page_offset
    return start, start + chunk.total_compressed_size


def shard_ranges(
    metadata: pq.FileMetaData, row_groups: range, leaves: Sequence[int]
) -> list[tuple[int, int]]:
    """The byte ranges of the given leaf columns in ``row_groups``, sorted and merged where they touch."""
    ranges = sorted(
        chunk_range(metadata.row_group(group).column(leaf)) for group in row_groups for leaf in leaves
    )
    merged: list[tuple[int, int]] = []
    for start, end in ranges:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def coalesce(ranges: Sequence[tuple[int, int]], hole: int, limit: int) -> list[tuple[int, int]]:
    """The reads that cover ``ranges`` (sorted, disjoint ``[start, end)``): consecutive ranges at most
    ``hole`` bytes apart share one read while it spans at most ``limit`` bytes; a range longer than
    ``limit`` is one read of its own, never split. pyarrow's rule (``CacheOptions``: ``hole_size_limit``,
    ``range_size_limit``); the gap bytes are read and dropped."""
    reads: list[tuple[int, int]] = []
    for start, end in ranges:
        if reads and start - reads[-1][1] <= hole and end - reads[-1][0] <= limit:
            reads[-1] = (reads[-1][0], end)
        else:
            reads.append((start, end))
    return reads


def column_bytes(metadata: pq.FileMetaData, row_groups: range, leaves: dict[str, range]) -> dict[str, int]:
    """Each top-level column's compressed bytes over ``row_groups`` (what caching it costs)."""
    return {
        name: sum(metadata.row_group(g).column(leaf).total_compressed_size for g in row_groups for leaf in run)
        for name, run in leaves.items()
    }


@dataclass(frozen=True)
class Segments:
    """The original file's ranges kept in a local copy, back to back from local offset 0."""

    starts: np.ndarray  # int64 (k,): start of each range in the original file, ascending
    ends: np.ndarray  # int64 (k,)
    local_starts: np.ndarray  # int64 (k,): where each range begins in the local copy

    @classmethod
    def of(cls, ranges: Sequence[tuple[int, int]]) -> Segments:
        starts = np.array([start for start, _ in ranges], np.int64)
        ends = np.array([end for _, end in ranges], np.int64)
        local_starts = np.concatenate([[0], np.cumsum(ends - starts)[:-1]]).astype(np.int64)
        return cls(starts, ends, local_starts)

    @property
    def total(self) -> int:
        return int((self.ends - self.starts).sum())

    def local_offset(self, position: int, length: int) -> int | None:
        """Where ``[position, position + length)`` of the original file lies in the local copy; None when
        it is not inside one kept range."""
        found = int(np.searchsorted(self.starts, position, side="right")) - 1
        if found < 0 or position + length > int(self.ends[found]):
            return None
        return int(self.local_starts[found]) + position - int(self.starts[found])


__all__ = [
    "Segments",
    "chunk_range",
    "coalesce",
    "column_bytes",
    "leaf_count",
    "leaves_per_column",
    "shard_ranges",
]
