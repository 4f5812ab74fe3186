"""``index.json`` (version 2): parse, validate and write the list of shards of one stream.

The index is the only place that says which files make up a dataset, so it is checked strictly:
a wrong version, malformed entries or a basename that escapes the dataset folder are refused with an
error that names the file and the fix.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stream_plugin.errors import (
    IndexFormatError,
    IndexJSONError,
    MissingIndexError,
    UnsafePathError,
    check_int,
)
from stream_plugin.fileio import atomic_write_bytes
from stream_plugin.gc_pause import collection_paused

INDEX_BASENAME = "index.json"
INDEX_VERSION = 2
SHARD_FORMATS = ("mds", "json", "csv", "tsv", "xsv", "parquet")
_REQUIRED_KEYS = ("format", "samples", "raw_data")
# No shard file is plausibly larger than this (MDS offsets are uint32; 1 TiB leaves room for every
# format); a larger size is corruption or an attack, refused before any arithmetic trusts it.
MAX_FILE_BYTES = 1 << 40


@dataclass(frozen=True)
class FileInfo:
    """One file of a shard as the index describes it: name relative to the stream, size, digests."""

    basename: str
    bytes: int
    hashes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardEntry:
    """A validated shard entry of ``index.json``; ``config`` keeps the entry as written."""

    format: str
    samples: int
    raw_data: FileInfo
    zip_data: FileInfo | None
    compression: str | None
    hashes: tuple[str, ...]
    size_limit: int | None
    config: Mapping[str, Any]
    raw_meta: FileInfo | None = None
    zip_meta: FileInfo | None = None

    @property
    def stored_data(self) -> FileInfo:
        """The data file as stored remotely: the compressed one when there is one."""
        return self.zip_data or self.raw_data

    def file_pairs(self) -> list[tuple[FileInfo, FileInfo | None]]:
        """``(raw, compressed)`` for the data file and, for JSON/CSV formats, the meta file.

        The raw file is what readers open; the compressed one (or None) is what storage holds.
        """
        pairs: list[tuple[FileInfo, FileInfo | None]] = [(self.raw_data, self.zip_data)]
        if self.raw_meta is not None:
            pairs.append((self.raw_meta, self.zip_meta))
        return pairs


def check_basename(basename: object, *, source: str) -> str:
    """Return ``basename`` if it stays inside the stream folder, else raise ``UnsafePathError``."""
    if not isinstance(basename, str) or not basename:
        raise IndexFormatError(
            f"{source}: expected a non-empty string basename, found {basename!r}; rewrite the index "
            "with a writer of this package or MosaicML Streaming"
        )
    if "\x00" in basename:
        raise IndexFormatError(
            f"{source}: expected a basename without NUL bytes, found {basename!r}; the index is corrupt, "
            "regenerate it"
        )
    normalized = posixpath.normpath(basename.replace("\\", "/"))
    if (
        basename.startswith(("/", "\\"))
        or os.path.isabs(basename)
        or (len(basename) > 1 and basename[1] == ":")
        or normalized == ".."
        or normalized.startswith("../")
        or "/../" in f"/{basename.replace(chr(92), '/')}/"
    ):
        raise UnsafePathError(
            f"{source}: basename {basename!r} escapes the dataset folder; expected a relative path "
            "without '..' such as 'shard.00000.mds' or '3/shard.00000.mds'. Refusing to read it: "
            "fix or regenerate the index (for example with stream_plugin.merge_index)"
        )
    return basename


def _file_info(value: object, *, source: str, what: str) -> FileInfo | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise IndexFormatError(f"{source}: expected {what} to be an object or null, found {value!r}")
    size = check_int(
        f"{source}: {what}.bytes",
        value.get("bytes"),
        minimum=0,
        maximum=MAX_FILE_BYTES,
        error=IndexFormatError,
        fix="regenerate the index",
    )
    hashes = value.get("hashes") or {}
    if not isinstance(hashes, dict) or not all(isinstance(digest, str) for digest in hashes.values()):
        raise IndexFormatError(
            f"{source}: expected {what}.hashes to be an object of digest strings, found {hashes!r:.80}"
        )
    basename = check_basename(value.get("basename"), source=f"{source} {what}")
    return FileInfo(basename=basename, bytes=size, hashes=dict(hashes))


def parse_shard_entry(entry: object, *, source: str) -> ShardEntry:
    """Validate one shard entry (a dict from ``index.json``) and return it as a ``ShardEntry``."""
    if not isinstance(entry, dict):
        raise IndexFormatError(f"{source}: expected a shard entry object, found {type(entry).__name__}")
    missing = [key for key in _REQUIRED_KEYS if key not in entry]
    if missing:
        raise IndexFormatError(
            f"{source}: shard entry lacks required keys {missing}; found keys {sorted(entry)}. "
            "Regenerate the index with a writer of this package or MosaicML Streaming"
        )
    shard_format = entry["format"]
    if shard_format not in SHARD_FORMATS:
        raise IndexFormatError(
            f"{source}: expected format among {list(SHARD_FORMATS)}, found {shard_format!r}"
        )
    samples = check_int(
        f"{source}: samples", entry["samples"], minimum=0, error=IndexFormatError, fix="regenerate the index"
    )
    raw_data = _file_info(entry["raw_data"], source=source, what="raw_data")
    if raw_data is None:
        raise IndexFormatError(f"{source}: expected raw_data to describe the shard file, found null")
    raw_meta = _file_info(entry.get("raw_meta"), source=source, what="raw_meta")
    raw_bytes = raw_data.bytes + (raw_meta.bytes if raw_meta is not None else 0)
    # Every format but Parquet spends at least one byte (an offset, a newline) per sample; a Parquet
    # column chunk encodes a million equal values in a few bytes.
    if samples > raw_bytes and shard_format != "parquet":
        raise IndexFormatError(
            f"{source}: expected samples to be at most the {raw_bytes} raw bytes of the shard (every sample "
            f"takes at least one byte), found {samples}; the index is corrupt, regenerate it"
        )
    hashes = entry.get("hashes") or []
    if not isinstance(hashes, list) or not all(isinstance(name, str) for name in hashes):
        raise IndexFormatError(f"{source}: expected hashes to be a list of names, found {hashes!r}")
    compression = entry.get("compression")
    if compression is not None and not isinstance(compression, str):
        raise IndexFormatError(
            f"{source}: expected compression to be a string or null, found {compression!r}"
        )
    size_limit = entry.get("size_limit")
    return ShardEntry(
        format=shard_format,
        samples=samples,
        raw_data=raw_data,
        zip_data=_file_info(entry.get("zip_data"), source=source, what="zip_data"),
        compression=compression,
        hashes=tuple(hashes),
        size_limit=size_limit if isinstance(size_limit, int) else None,
        config=entry,
        raw_meta=raw_meta,
        zip_meta=_file_info(entry.get("zip_meta"), source=source, what="zip_meta"),
    )


def parse_index(text: str | bytes, *, source: str = INDEX_BASENAME) -> list[ShardEntry]:
    """Parse the text of an ``index.json``; ``source`` names the file in error messages."""
    with collection_paused():  # a few objects per shard and no cycles: see gc_pause
        return _parse_index(text, source=source)


def _parse_index(text: str | bytes, *, source: str) -> list[ShardEntry]:
    try:
        document = json.loads(text)
    except RecursionError:
        raise IndexFormatError(
            f"{source}: expected a JSON document of plain shard entries, found values nested too deeply "
            "to parse; the file is corrupt or hostile. Re-download or regenerate it"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        position = (error.pos, error.lineno, error.colno) if isinstance(error, json.JSONDecodeError) else (0, 1, 1)
        raise IndexJSONError(
            f"{source}: expected a JSON document, found invalid JSON ({error}): Index file at {source} is empty "
            "or corrupted. It was not written completely by a shard writer; re-download or regenerate it",
            *position,
        ) from error
    if not isinstance(document, dict):
        raise IndexFormatError(
            f"{source}: expected a JSON object with 'shards' and 'version', found {type(document).__name__}"
        )
    version = document.get("version")
    if version != INDEX_VERSION:
        found = "no 'version' key" if "version" not in document else f"version {version!r}"
        raise IndexFormatError(
            f"{source}: expected index version {INDEX_VERSION}, found {found}. This package reads MDS "
            "version 2 datasets (MosaicML Streaming >= 0.4); rewrite the dataset with a current writer"
        )
    shards = document.get("shards")
    if not isinstance(shards, list):
        raise IndexFormatError(f"{source}: expected 'shards' to be a list, found {shards!r:.80}")
    entries = [parse_shard_entry(entry, source=f"{source} shard {i}") for i, entry in enumerate(shards)]
    _check_unique_basenames(entries, source=source)
    return entries


def _check_unique_basenames(entries: Sequence[ShardEntry], *, source: str) -> None:
    """Refuse two shard entries naming one file: they would share (and fight over) one cached copy."""
    seen: dict[str, int] = {}
    for number, entry in enumerate(entries):
        for raw, stored in entry.file_pairs():
            for field_name, info in (("raw", raw), ("zip", stored)):
                if info is None:
                    continue
                first = seen.setdefault(info.basename, number)
                if first != number:
                    raise IndexFormatError(
                        f"{source} shard {number}: expected each file to belong to one shard entry, found "
                        f"{field_name} basename {info.basename!r} already in shard {first} (a duplicate "
                        "entry); regenerate the index"
                    )


def load_index(path: str | os.PathLike[str]) -> list[ShardEntry]:
    """Read and validate ``index.json`` at ``path`` (a file, or a folder that holds one)."""
    index_path = Path(path)
    if index_path.is_dir():
        index_path = index_path / INDEX_BASENAME
    try:
        text = index_path.read_bytes()
    except FileNotFoundError as error:
        raise MissingIndexError(
            f"{index_path}: expected an index file, found none; point at a folder written by a shard "
            "writer (it holds index.json next to its shards)"
        ) from error
    return parse_index(text, source=str(index_path))


def index_document(shard_configs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``index.json`` object for a list of shard entry dicts."""
    return {"shards": list(shard_configs), "version": INDEX_VERSION}


def write_index(folder: str | os.PathLike[str], shard_configs: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``index.json`` atomically (sorted keys, as MosaicML writes it) and return its path."""
    path = Path(folder) / INDEX_BASENAME
    text = json.dumps(index_document(shard_configs), sort_keys=True)
    atomic_write_bytes(path, text.encode("utf-8"), durable=True)
    return path
