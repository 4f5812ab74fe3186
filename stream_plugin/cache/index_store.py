"""The parsed index of a stream, kept in binary form next to ``index.json``: parsed once per node.

``index.json.columns`` in the control folder holds the ``IndexColumns`` of the index, the fingerprint
digest of its bytes, and what identifies the ``index.json`` it was built from: the file's ``os.stat``
key (inode, size, modification and change times: every rewrite changes one of them, and an atomic
replace gives a new inode) and, for a remote stream, the remote identity recorded with the download.
Any difference, a wrong checksum or a truncated file makes it stale: the index is parsed again and
the binary form rewritten. (Writers replace ``index.json`` atomically, which gives a new inode; a tool
that rewrites it in place changes its modification time, in nanoseconds, and its change time, which no
user can set back. Only a same-size in-place rewrite within one tick of the file system's clock as the
previous write, with a parse in between, could go unseen.) The first process of a node builds it under the index lock; the others
wait on that lock (the kernel releases it if the builder dies) and then map the binary form: its
columns are read-only views of the file's pages, which the node's processes share in the page cache
(a warm open of a million shards makes almost no fresh memory).

A local-only dataset folder that cannot be written (read-only) is parsed in every process instead.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stream_plugin.cache.locks import ControlFolder, locked
from stream_plugin.errors import MissingIndexError
from stream_plugin.fileio import atomic_write_parts
from stream_plugin.format.index import ShardEntry
from stream_plugin.format.index_columns import (
    IndexColumns,
    LazyEntries,
    read_columns,
    stat_key_of,
)
from stream_plugin.redaction import get_logger

_log = get_logger(__name__)

_MAGIC = b"SPIXCOL1"
_LENGTH = struct.Struct("<Q")
_CHECKSUM = struct.Struct("<I")
_FIELDS = 5  # samples, stored bytes, span start, span end, kind


@dataclass(frozen=True)
class OpenedIndex:
    """A stream's validated index: columns, entries built on demand, and its fingerprint digest."""

    columns: IndexColumns
    entries: Sequence[ShardEntry]
    digest: str


def open_index(
    path: Path, control: ControlFolder, index_name: str, *, identity: str | None
) -> OpenedIndex:
    """The index at ``path`` from its binary form when that is current, else parsed (once per node)."""
    store = control.index_columns(index_name)
    found = _load_current(path, store, identity)
    if found is not None:
        return found
    with _index_lock(control.index_lock(index_name)):
        found = _load_current(path, store, identity)  # another process built it while we waited
        if found is not None:
            return found
        return _build(path, store, identity)


def _index_lock(path: Path) -> AbstractContextManager[None]:
    """The node's index lock; no lock in a folder this process cannot write (a read-only dataset:
    every process parses the index, and nothing is kept)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644))
    except OSError as error:
        _log.debug("%s: cannot create the index lock (%s); parsing the index without keeping it", path, error)
        return nullcontext()
    return locked(path)


def store_columns(
    store: Path, index_path: Path, columns: IndexColumns, *, digest: str, identity: str | None
) -> None:
    """Write the binary form of ``columns`` for the index file at ``index_path`` (best effort)."""
    if columns.spans is None:
        return  # an unusual layout, parsed whole: its entries cannot be found in the text by range
    key = stat_key_of(index_path.stat())
    header = json.dumps(
        {
            "stat": list(key),
            "identity": identity,
            "digest": digest,
            "num_shards": columns.num_shards,
            "num_kinds": len(columns.first_of_kind),
        }
    ).encode("utf-8")
    numbers = [
        columns.samples,
        columns.stored_bytes,
        columns.spans[:, 0],
        columns.spans[:, 1],
        columns.kind_per_shard,
        columns.first_of_kind,
    ]  # five (num_shards,) columns, then (num_kinds,)
    parts: list[bytes | memoryview] = [_MAGIC, _LENGTH.pack(len(header)), header]
    parts += [np.ascontiguousarray(column, "<i8").data.cast("B") for column in numbers]
    checksum = 0
    for part in parts:
        checksum = zlib.crc32(part, checksum)
    try:
        atomic_write_parts(store, [*parts, _CHECKSUM.pack(checksum)])
    except OSError as error:
        _log.debug("%s: cannot keep the parsed index (%s); each process parses it", store, error)


def _build(path: Path, store: Path, identity: str | None) -> OpenedIndex:
    try:
        with open(path, "rb") as file:
            key = stat_key_of(os.fstat(file.fileno()))
            columns, parsed, digest = read_columns(file, source=str(path), identity=identity)
    except FileNotFoundError as error:
        raise MissingIndexError(
            f"{path}: expected an index file, found none (No `remote` provided, but local file {path} does not "
            "exist); point at a folder written by a shard "
            "writer (it holds index.json next to its shards)"
        ) from error
    if parsed is not None:
        return OpenedIndex(columns, parsed, digest)
    store_columns(store, path, columns, digest=digest, identity=identity)
    assert columns.spans is not None
    return OpenedIndex(columns, LazyEntries.of_file(str(path), columns.spans, source=str(path), stat_key=key), digest)


def _load_current(path: Path, store: Path, identity: str | None) -> OpenedIndex | None:
    """The binary form at ``store`` if it is whole and was built from ``path`` as it is now."""
    try:
        key = stat_key_of(path.stat())
        data = _mapped(store)
    except FileNotFoundError:
        return None
    loaded = _decode(data, store)
    if loaded is None:
        return None
    header, columns = loaded
    if tuple(header["stat"]) != key or header["identity"] != identity:
        _log.debug("%s: built from another version of %s; parsing it again", store, path)
        return None
    assert columns.spans is not None
    entries = LazyEntries.of_file(str(path), columns.spans, source=str(path), stat_key=key)
    return OpenedIndex(columns, entries, str(header["digest"]))


def _mapped(store: Path) -> bytes | mmap.mmap:
    """The bytes of the binary form at ``store``, as a read-only map of the file: the node's ranks
    share its pages in the page cache instead of each copying it into memory of its own (fresh memory
    is what a warm open of a large index spent most of its time on). The file is only ever replaced by
    a rename, never rewritten in place, so the mapped file never changes under the map."""
    with open(store, "rb") as file:
        if not os.fstat(file.fileno()).st_size:
            return b""  # an empty file cannot be mapped (and is refused as cut short)
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


def _decode(data: bytes | mmap.mmap, store: Path) -> tuple[dict[str, Any], IndexColumns] | None:
    """The header and columns of a binary form; None (logged) when it is cut short or corrupt."""
    try:
        body = memoryview(data)[: -_CHECKSUM.size]  # a view: the columns below are views of ``data`` too
        (checksum,) = _CHECKSUM.unpack(memoryview(data)[-_CHECKSUM.size :])
        if body[: len(_MAGIC)] != _MAGIC or zlib.crc32(body) != checksum:
            raise ValueError("wrong magic or checksum")
        (header_size,) = _LENGTH.unpack_from(body, len(_MAGIC))
        header_end = len(_MAGIC) + _LENGTH.size + header_size
        header = json.loads(bytes(body[len(_MAGIC) + _LENGTH.size : header_end]))
        shards, kinds = int(header["num_shards"]), int(header["num_kinds"])
        numbers = np.frombuffer(body, "<i8", offset=header_end)  # (5 * num_shards + num_kinds,)
        if len(numbers) != _FIELDS * shards + kinds:
            raise ValueError(f"{len(numbers)} numbers for {shards} shards and {kinds} kinds")
    except (ValueError, KeyError, TypeError, struct.error) as error:
        _log.warning("%s: the parsed index kept here is corrupt (%s); parsing index.json again", store, error)
        return None
    table = numbers[: _FIELDS * shards].reshape(_FIELDS, shards).astype(np.int64, copy=False)  # (5, num_shards)
    columns = IndexColumns(
        samples=table[0],
        stored_bytes=table[1],
        spans=table[2:4].T,  # (num_shards, 2)
        kind_per_shard=table[4],
        first_of_kind=numbers[_FIELDS * shards :].astype(np.int64, copy=False),
    )
    return header, columns


__all__ = ["OpenedIndex", "open_index", "store_columns"]
