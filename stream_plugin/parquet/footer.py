"""Read a Parquet file's footer (its metadata) through a ranged store, without reading its data.

A Parquet file ends with ``<metadata><4-byte little-endian length>PAR1``. One ranged read of the last
``_FIRST_READ`` bytes holds the whole footer of nearly every file; a longer one costs one more read.
"""

from __future__ import annotations

from dataclasses import dataclass

from stream_plugin.errors import FormatError
from stream_plugin.parquet.arrow import pa, pq
from stream_plugin.storage.base import ObjectInfo, RangedStore

MAGIC = b"PAR1"
_TAIL = 8  # the metadata length (4 bytes) and the magic
_FIRST_READ = 64 * 1024


class ParquetFormatError(FormatError):
    """A file is not Parquet, its footer is cut short, or its contents differ from the index."""


@dataclass(frozen=True)
class Footer:
    """The footer of one Parquet file: ``data`` is the metadata plus its length and the closing magic."""

    key: str
    info: ObjectInfo
    data: bytes

    @property
    def metadata(self) -> pq.FileMetaData:
        return parse_footer(self.data, source=self.key)


def parse_footer(data: bytes, *, source: str) -> pq.FileMetaData:
    """The ``FileMetaData`` of a footer (metadata, length, ``PAR1``) without the file around it."""
    try:
        return pq.read_metadata(pa.BufferReader(MAGIC + data))
    except (OSError, pa.ArrowException) as error:
        raise ParquetFormatError(
            f"{source}: expected a Parquet footer, found metadata pyarrow cannot parse ({error}); the file is "
            "corrupt or truncated: rewrite it, or leave it out of the dataset"
        ) from error


def footer_length(tail: bytes, size: int, *, source: str) -> int:
    """The footer's length (metadata + 8) from the file's last 8 bytes, checked against the file size."""
    if size < len(MAGIC) + _TAIL or tail[-4:] != MAGIC:
        found = f"{size} bytes" if size < len(MAGIC) + _TAIL else f"it ends with {tail[-4:]!r}"
        raise ParquetFormatError(
            f"{source}: expected a Parquet file (ending with the magic bytes b'PAR1'), found {found}; index only "
            "Parquet files (pass a folder of *.parquet files), or rewrite this one"
        )
    metadata = int.from_bytes(tail[-_TAIL:-4], "little")
    if metadata + _TAIL + len(MAGIC) > size:
        raise ParquetFormatError(
            f"{source}: expected a footer of at most {size - _TAIL - len(MAGIC)} bytes (the file holds {size}), "
            f"found its length field says {metadata}; the file is truncated or corrupt: rewrite it"
        )
    return metadata + _TAIL


def read_footer(store: RangedStore, key: str, *, timeout: float | None = None) -> Footer:
    """The footer of ``key``: its size and identity, then one ranged read of its tail (two if long)."""
    info = store.object_info(key, timeout=timeout)
    size = info.size
    start = max(0, size - _FIRST_READ)
    tail = store.read_range(key, start, size, timeout=timeout)
    length = footer_length(tail, size, source=key)
    if length > len(tail):
        tail = store.read_range(key, size - length, size, timeout=timeout)
    data = tail[len(tail) - length :]
    return Footer(key=key, info=info, data=data)


__all__ = ["MAGIC", "Footer", "ParquetFormatError", "footer_length", "parse_footer", "read_footer"]
