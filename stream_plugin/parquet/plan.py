"""The shards of a Parquet dataset: runs of whole row groups of one file, packed up to a target size.

Pure: from each file's row-group sizes to ``(file, first row group, stop)`` triples, with no I/O. A row
group larger than the target is a shard of its own; a file is never split inside a row group, and a
shard never spans two files.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_SHARD_BYTES = 64 * 1024 * 1024


def plan_shards(
    row_group_bytes_per_file: Sequence[Sequence[int]], target: int = DEFAULT_SHARD_BYTES
) -> list[tuple[int, int, int]]:
    """``(file, first, stop)`` per shard, in file order: row groups ``[first, stop)`` of ``file``, each
    run as long as it stays within ``target`` bytes (at least one row group)."""
    assert target > 0, "the target shard size is checked where it is given"
    shards: list[tuple[int, int, int]] = []
    for file, sizes in enumerate(row_group_bytes_per_file):
        first, total = 0, 0
        for group, size in enumerate(sizes):
            if group > first and total + size > target:
                shards.append((file, first, group))
                first, total = group, 0
            total += size
        if len(sizes) > first:
            shards.append((file, first, len(sizes)))
    return shards


__all__ = ["DEFAULT_SHARD_BYTES", "plan_shards"]
