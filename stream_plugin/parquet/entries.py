"""A Parquet shard's entry in ``index.json``: writing it, reading it back, and the views a stream reads.

An entry is an ordinary index entry (``format: "parquet"``, ``samples``, ``raw_data``) plus a
``parquet`` object that says where the shard's bytes are::

    "parquet": {"source": null | URL, "file": "data/train-0.parquet", "file_bytes": 1234,
                "identity": "etag...", "row_groups": [0, 3], "footer_bytes": 512,
                "column_bytes": {"label": 40, "text": 900}, "column_order": ["text", "label"]}

``source`` is null when the files lie beside ``index.json``, else the data's URL (an index kept in a
folder of the user's). ``raw_data`` names the shard's local cache file (its byte ranges plus the
footer) and its size, which the cache verifies as it verifies any shard. ``column_order`` is the
schema's order of the columns (``column_bytes`` is written with sorted keys); an index without it
lists them sorted.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlparse

from stream_plugin.errors import ConfigError, IndexFormatError
from stream_plugin.format.index import FileInfo, ShardEntry, check_basename
from stream_plugin.format.index_columns import _EntrySequence


@dataclass(frozen=True)
class ParquetShard:
    """Where one Parquet shard's bytes lie: row groups ``[first, stop)`` of ``file`` in ``source``."""

    source: str | None
    file: str
    file_bytes: int
    identity: str | None
    row_groups: range
    footer_bytes: int
    column_bytes: Mapping[str, int]
    columns: tuple[str, ...] | None = None  # the columns a stream reads; None: all
    direct: str | None = None  # read the original file at this path instead of a cached copy

    @property
    def read_columns(self) -> tuple[str, ...]:
        return tuple(self.column_bytes) if self.columns is None else self.columns

    def cached_bytes(self) -> int:
        """The size of the shard's local copy: its columns' chunks plus the footer."""
        return self.footer_bytes + sum(self.column_bytes[name] for name in self.read_columns)


def shard_entry_config(
    basename: str, samples: int, shard: ParquetShard
) -> dict[str, Any]:
    """The ``index.json`` entry of a Parquet shard."""
    return {
        "format": "parquet",
        "samples": samples,
        "raw_data": {"basename": basename, "bytes": shard.cached_bytes(), "hashes": {}},
        "zip_data": None,
        "compression": None,
        "hashes": [],
        "size_limit": None,
        "parquet": {
            "source": shard.source,
            "file": shard.file,
            "file_bytes": shard.file_bytes,
            "identity": shard.identity,
            "row_groups": [shard.row_groups.start, shard.row_groups.stop],
            "footer_bytes": shard.footer_bytes,
            "column_bytes": dict(shard.column_bytes),
            "column_order": list(shard.column_bytes),
        },
    }


def _fail(source: str, what: str, found: object) -> IndexFormatError:
    return IndexFormatError(
        f"{source}: expected {what} in the entry's 'parquet' object, found {found!r:.80}; the index is corrupt "
        "or from another version: index the data again (stream-plugin index-parquet)"
    )


def parquet_shard(entry: ShardEntry) -> ParquetShard:
    """The ``parquet`` object of an entry, validated."""
    source = f"Parquet shard {entry.raw_data.basename}"
    found = entry.config.get("parquet")
    if not isinstance(found, dict):
        raise _fail(source, "an object", found)
    where = found.get("source")
    if where is not None and not isinstance(where, str):
        raise _fail(source, "source to be a URL or null", where)
    file = check_basename(found.get("file"), source=f"{source} file")
    numbers = {name: found.get(name) for name in ("file_bytes", "footer_bytes")}
    for name, value in numbers.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise _fail(source, f"{name} to be a whole number of bytes", value)
    groups = found.get("row_groups")
    if not (isinstance(groups, list) and len(groups) == 2 and all(isinstance(g, int) for g in groups)):
        raise _fail(source, "row_groups to be [first, stop]", groups)
    sizes = found.get("column_bytes")
    if not isinstance(sizes, dict) or not all(isinstance(v, int) for v in sizes.values()):
        raise _fail(source, "column_bytes to map each column to its bytes", sizes)
    order = found.get("column_order")
    if order is not None:
        if not (isinstance(order, list) and all(isinstance(n, str) for n in order) and sorted(order) == sorted(sizes)):
            raise _fail(source, "column_order to list the columns of column_bytes", order)
        sizes = {name: sizes[name] for name in order}
    identity = found.get("identity")
    return ParquetShard(
        source=where,
        file=file,
        file_bytes=int(found["file_bytes"]),
        identity=None if identity is None else str(identity),
        row_groups=range(groups[0], groups[1]),
        footer_bytes=int(found["footer_bytes"]),
        column_bytes=sizes,
        columns=_tuple_or_none(found.get("read_columns")),
        direct=found.get("direct"),
    )


def _tuple_or_none(value: object) -> tuple[str, ...] | None:
    return None if value is None else tuple(str(name) for name in value)  # type: ignore[attr-defined]


def columns_folder(columns: Sequence[str]) -> str:
    """The cache sub-folder of a column set: one per set, so two sets never share a local file."""
    digest = hashlib.sha256("\0".join(columns).encode("utf-8")).hexdigest()[:12]
    return f"columns-{digest}"


def local_path(source: str | None, local: str) -> str | None:
    """The folder that holds the Parquet files when it is on this machine: ``source`` (a path or a
    ``file://`` URL), or, with no source, the folder of the index; None for a remote source."""
    if source is None:
        return local
    parsed = urlparse(source)
    if parsed.scheme == "file":
        return parsed.path
    if "://" not in source:
        return source
    return None


@dataclass(frozen=True)
class ReadView:
    """How a stream reads its Parquet shards: which columns, and whether straight from local files."""

    columns: tuple[str, ...] | None
    local: str | None  # a local-only stream's folder: read the Parquet files in place

    def entry(self, entry: ShardEntry) -> ShardEntry:
        """``entry`` as this stream reads it (an MDS entry passes unchanged)."""
        if entry.format != "parquet" or (self.columns is None and self.local is None):
            return entry
        shard = parquet_shard(entry)
        config = dict(entry.config)
        section = dict(config["parquet"])
        if self.columns is not None:
            missing = [name for name in self.columns if name not in shard.column_bytes]
            if missing:
                raise ConfigError(
                    f"columns: expected names among the Parquet columns {list(shard.column_bytes)}, found "
                    f"{missing} missing (shard {entry.raw_data.basename}); pass names from that list"
                )
            section["read_columns"] = list(self.columns)
        if self.local is not None:
            folder = local_path(shard.source, self.local)
            if folder is None:
                raise ConfigError(
                    f"remote: expected a remote for an index whose Parquet files are at {shard.source!r}, found "
                    f"a local-only stream ({self.local!r}); pass remote=<the index's folder> and a local cache "
                    "folder"
                )
            path = os.path.join(folder, *posixpath.split(shard.file))
            section["direct"] = path
            config["parquet"] = section
            raw = FileInfo(basename=path, bytes=shard.file_bytes)
            return replace(entry, raw_data=raw, config=config)
        config["parquet"] = section
        shard = replace(shard, columns=self.columns)
        name = f"{columns_folder(self.columns or ())}/{entry.raw_data.basename}"
        return replace(entry, raw_data=FileInfo(basename=name, bytes=shard.cached_bytes()), config=config)


class ViewedEntries(_EntrySequence):
    """A stream's entries as its ``ReadView`` reads them, each built when asked for."""

    def __init__(self, entries: Sequence[ShardEntry], view: ReadView) -> None:
        self._entries = entries
        self._view = view

    def __len__(self) -> int:
        return len(self._entries)

    def _at(self, number: int) -> ShardEntry:
        return self._view.entry(self._entries[number])


__all__ = [
    "ParquetShard",
    "ReadView",
    "ViewedEntries",
    "columns_folder",
    "local_path",
    "parquet_shard",
    "shard_entry_config",
]
