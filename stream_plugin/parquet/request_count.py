"""How many requests one download of a Parquet shard makes: the rule ``write_shard`` follows and the
simulator counts.

A download checks the file's size and identity (one HEAD, or none where the store's ranged GET
answers them: every built-in remote store's), fetches the footer unless its process kept it from an earlier shard of the file
(``FooterCache``), and reads the shard's column chunks: ranges at most ``HOLE_BYTES`` apart share one
read of at most ``READ_LIMIT_BYTES`` (``layout.coalesce``, pyarrow's defaults). A shard of all columns
is one run of bytes, hence one read.
"""

from __future__ import annotations

from stream_plugin.parquet.entries import ParquetShard
from stream_plugin.parquet.layout import coalesce
from stream_plugin.storage.registry import BUILTIN_BACKENDS

HOLE_BYTES = 8 * 1024  # pyarrow's CacheOptions.hole_size_limit: a gap this small is cheaper read than asked for
READ_LIMIT_BYTES = 32 * 1024 * 1024  # pyarrow's CacheOptions.range_size_limit: no coalesced read longer
_MAGIC_BYTES = 4  # a Parquet file's first row group starts after b"PAR1"
# The schemes whose store answers a ranged GET with the object's size and identity
# (``read_range_and_info``): every built-in remote store (tests/parquet/test_requests_per_shard.py checks
# each); fsspec's and plugins' stores are checked by a HEAD.
CHECKED_ON_READ_SCHEMES = frozenset(BUILTIN_BACKENDS) - {"file"}


def download_requests(reads: int, *, footer_kept: bool, checked_on_read: bool = False) -> int:
    """The requests of one download: the footer unless kept, ``reads``, and the identity check (a HEAD,
    unless the store answers it on the first of those GETs)."""
    gets = (0 if footer_kept else 1) + reads
    return gets + (0 if checked_on_read and gets else 1)


def checked_on_read(url: str) -> bool:
    """Whether the store of ``url`` answers a ranged GET with the object's size and identity."""
    scheme, found, _ = url.partition("://")
    return bool(found) and scheme.lower() in CHECKED_ON_READ_SCHEMES


def index_ranges(shard: ParquetShard) -> list[tuple[int, int]]:
    """The byte ranges of the shard's columns as the index alone places them (it records each column's
    bytes over the shard, not each chunk's offset): row groups of equal size back to back, each column's
    chunk in schema order. Exact for all columns (one run); for some, exact when the row groups are."""
    sizes = shard.column_bytes  # per column, over the shard's row groups, in schema order (an older index: sorted)
    total = sum(sizes.values())
    if shard.columns is None or set(shard.columns) >= set(sizes):
        return [(_MAGIC_BYTES, _MAGIC_BYTES + total)] if total else []
    groups = max(1, len(shard.row_groups))
    wanted = set(shard.columns)
    ranges: list[tuple[int, int]] = []
    position = _MAGIC_BYTES
    for group in range(groups):
        for name, size in sizes.items():
            chunk = size // groups + (size % groups if group == groups - 1 else 0)
            if name in wanted and chunk:
                if ranges and ranges[-1][1] == position:
                    ranges[-1] = (ranges[-1][0], position + chunk)
                else:
                    ranges.append((position, position + chunk))
            position += chunk
    return ranges


def index_requests(shard: ParquetShard, location: str) -> int:
    """The requests of one download of ``shard`` counted from the index (at ``location``, where the data
    is unless the shard names its source), as the first shard of its file that its process downloads
    (the footer fetched): an upper bound, met at start-up, when a node's first shards are seldom of one
    file."""
    reads = coalesce(index_ranges(shard), HOLE_BYTES, READ_LIMIT_BYTES)
    return download_requests(len(reads), footer_kept=False, checked_on_read=checked_on_read(shard.source or location))


__all__ = [
    "CHECKED_ON_READ_SCHEMES",
    "HOLE_BYTES",
    "READ_LIMIT_BYTES",
    "checked_on_read",
    "download_requests",
    "index_ranges",
    "index_requests",
]
