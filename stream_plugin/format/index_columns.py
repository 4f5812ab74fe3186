"""The shards of one ``index.json`` as columns: parsed once, each ``ShardEntry`` built on demand.

A million-shard index is 270 MB of JSON. Holding one validated ``ShardEntry`` per shard costs gigabytes
and tens of seconds, yet opening a dataset needs only a few numbers per shard (samples, stored bytes)
and a reader needs the entries of the few shards it opens. So the index is scanned entry by entry, each
entry checked exactly as ``parse_shard_entry`` checks it: by msgspec's native decoder (``index_native``)
when it can vouch for the result, else by the JSON module's own scanner (nothing but the current entry
is held as Python objects). What is kept is:

* ``IndexColumns``: numpy columns, plus the byte range of each entry in the index text;
* ``LazyEntries``: a sequence of ``ShardEntry`` over those ranges, each parsed when first asked for.

Anything unusual (another key order, odd whitespace, any error) falls back to ``parse_index`` on the
whole text, so error messages and accepted inputs stay exactly those of ``parse_index``.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
from array import array
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from json.decoder import JSONDecoder
from typing import Any, BinaryIO, overload

import numpy as np

from stream_plugin.errors import IndexFormatError
from stream_plugin.format.index import (
    MAX_FILE_BYTES,
    SHARD_FORMATS,
    ShardEntry,
    parse_index,
    parse_shard_entry,
)
from stream_plugin.format.index_native import native_columns
from stream_plugin.format.shard_columns import (
    AFTER_ENTRY,
    HEAD_SHARDS_FIRST,
    HEAD_VERSION_FIRST,
    PLAIN_BASENAME,
    TAIL_CHARS,
    TAIL_SHARDS_FIRST,
    TAIL_VERSION_FIRST,
    IndexColumns,
    stored_bytes,
)
from stream_plugin.gc_pause import collection_paused

_HEAD_SHARDS_FIRST = re.compile(HEAD_SHARDS_FIRST)
_HEAD_VERSION_FIRST = re.compile(HEAD_VERSION_FIRST)
_TAIL_SHARDS_FIRST = re.compile(TAIL_SHARDS_FIRST)
_TAIL_VERSION_FIRST = re.compile(TAIL_VERSION_FIRST)
_AFTER_ENTRY = re.compile(AFTER_ENTRY)
_PLAIN_BASENAME = re.compile(PLAIN_BASENAME)
_FORMATS = frozenset(SHARD_FORMATS)
_ENTRY_CACHE = 4096  # entries a LazyEntries keeps built (a reader asks for each a few times)


def index_digest(index: bytes | mmap.mmap, identity: str | None) -> str:
    """What identifies a stream's data: its index bytes and, for a remote, the identity of the write
    they came from, so that a state saved on a rewritten remote is refused even when the bytes match."""
    digest = hashlib.sha256(index)
    if identity is not None:
        digest.update(b"\0" + identity.encode("utf-8"))
    return digest.hexdigest()


def decoded_index(data: bytes) -> str | bytes:
    """The text of an ``index.json`` as ``json.loads`` decodes it, when it is UTF-8 without a byte-order
    mark (so ``json.loads`` of either gives the same); else ``data`` itself. A caller that then drops
    ``data`` holds one copy of a large index, not two, while it is parsed."""
    if json.detect_encoding(data[:4]) != "utf-8" or data.startswith(b"\xef\xbb\xbf"):
        return data
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return data


def parse_columns(text: str | bytes, *, source: str) -> tuple[IndexColumns, list[ShardEntry] | None]:
    """Validate ``text`` (an ``index.json``'s bytes, or its ``decoded_index``) as ``parse_index`` does;
    return its columns.

    The second value is the list of parsed entries when the text needed ``parse_index`` itself (an
    unusual layout), in which case the columns have no spans; otherwise None.
    """
    with collection_paused():  # a few objects per shard and no cycles: see gc_pause
        columns = native_columns(text) if isinstance(text, bytes) else None
        if columns is not None:
            return columns, None
        try:
            columns = _scan(text, source=source)
        except IndexFormatError:
            columns = None  # parse_index below raises the error parse_index raises, first one first
        if columns is not None:
            return columns, None
        entries = parse_index(text, source=source)
    return columns_of(entries), entries


def read_columns(
    file: BinaryIO, *, source: str, identity: str | None
) -> tuple[IndexColumns, list[ShardEntry] | None, str]:
    """Read an open ``index.json`` and return what ``parse_columns`` returns, then its ``index_digest``.

    The file is mapped, not read: the native scan reads it in the page cache, and the digest is taken
    on another thread meanwhile (``hashlib`` lets go of the interpreter lock). When the JSON module must
    parse it, its bytes are dropped once decoded: one copy of a large index is held while it is
    parsed, not two.
    """
    text = _contents(file)
    with ThreadPoolExecutor(max_workers=1) as pool:
        digest = pool.submit(index_digest, text, identity)
        with collection_paused():
            columns = native_columns(text)
    if columns is not None:
        return columns, None, digest.result()
    decoded = decoded_index(text if isinstance(text, bytes) else text[:])
    del text
    columns, parsed = parse_columns(decoded, source=source)
    return columns, parsed, digest.result()


def _contents(file: BinaryIO) -> bytes | mmap.mmap:
    """The whole of ``file``: a read-only map of it (its pages stay the page cache's: a large index is
    not copied into fresh memory), or its bytes where it cannot be mapped (empty, or not a file)."""
    try:
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return file.read()


def columns_of(entries: Sequence[ShardEntry]) -> IndexColumns:
    """The columns of already parsed entries (no spans)."""
    kinds: dict[tuple[str, tuple[str, ...]], int] = {}
    first: list[int] = []
    kind_per_shard = np.empty(len(entries), np.int64)
    for number, entry in enumerate(entries):
        kind = kinds.setdefault((entry.format, _encodings_key(entry.config)), len(kinds))
        if kind == len(first):
            first.append(number)
        kind_per_shard[number] = kind
    return IndexColumns(
        samples=np.array([entry.samples for entry in entries], np.int64),
        stored_bytes=np.array([stored_bytes(entry) for entry in entries], np.int64),
        spans=None,
        kind_per_shard=kind_per_shard,
        first_of_kind=np.array(first, np.int64),
    )


def _encodings_key(config: Any) -> tuple[str, ...]:
    """The key under which shards share one column layout (``refuse_unsafe_columns`` checks one each)."""
    encodings = config.get("column_encodings") or ()
    try:
        return tuple(map(str, encodings))
    except TypeError:  # not a list: a shard of its own kind (its reader refuses it)
        return (repr(encodings),)


def _plain_file(value: Any) -> tuple[str, int] | None:
    """``(basename, bytes)`` of a file object ``_file_info`` accepts as it stands, else None."""
    if type(value) is not dict:
        return None
    size = value.get("bytes")
    name = value.get("basename")
    if type(size) is not int or not 0 <= size <= MAX_FILE_BYTES or type(name) is not str:
        return None
    if _PLAIN_BASENAME.fullmatch(name) is None:
        return None
    hashes = value.get("hashes")
    if hashes and not (type(hashes) is dict and all(type(digest) is str for digest in hashes.values())):
        return None
    return name, size


def _plain_entry(entry: Any, names: array[int]) -> tuple[int, int] | None:
    """``(samples, stored bytes)`` of an entry ``parse_shard_entry`` accepts, appending the hashes of its
    file names to ``names``; None when the entry needs ``parse_shard_entry`` itself (unusual, or invalid)."""
    if type(entry) is not dict:
        return None
    shard_format, samples = entry.get("format"), entry.get("samples")
    if type(shard_format) is not str or shard_format not in _FORMATS or type(samples) is not int or samples < 0:
        return None
    hashes = entry.get("hashes")
    compression = entry.get("compression")
    if (hashes and not (type(hashes) is list and all(type(name) is str for name in hashes))) or (
        compression is not None and type(compression) is not str
    ):
        return None
    raw_data = _plain_file(entry.get("raw_data"))
    if raw_data is None:
        return None
    zip_data, raw_meta, zip_meta = entry.get("zip_data"), entry.get("raw_meta"), entry.get("zip_meta")
    if zip_data is None and raw_meta is None and zip_meta is None:  # the usual uncompressed MDS shard
        if samples > raw_data[1]:
            return None
        names.append(hash(raw_data[0]))
        return samples, raw_data[1]
    files = [raw_data]
    for value in (zip_data, raw_meta, zip_meta):
        if value is not None:
            info = _plain_file(value)
            if info is None:
                return None
            files.append(info)
    raw_bytes = raw_data[1]
    if raw_meta is not None:
        raw_bytes += files[2 if zip_data is not None else 1][1]
    elif zip_meta is not None:
        files.pop()  # a compressed meta file without a raw one is not a file of the shard
    if samples > raw_bytes:
        return None
    names.extend(hash(name) for name, _ in files)
    return samples, sum(size for _, size in files)


def _scan(text: str | bytes, *, source: str) -> IndexColumns | None:
    """Columns of an index in the usual layout (``{"shards": [...], "version": 2}`` in either key
    order); None for any other layout or any error, which ``parse_index`` then reports."""
    document = decoded_index(text) if isinstance(text, bytes) else text
    if isinstance(document, bytes):
        return None
    head = _HEAD_SHARDS_FIRST.match(document) or _HEAD_VERSION_FIRST.match(document)
    if head is None:
        return None
    tail_from = max(head.end() - 1, len(document) - TAIL_CHARS)
    tail_pattern = _TAIL_SHARDS_FIRST if head.re is _HEAD_SHARDS_FIRST else _TAIL_VERSION_FIRST
    tail = _find_tail(tail_pattern, document, tail_from)
    if tail is None:
        return None
    found = _scan_entries(document, head.end(), tail, source=source)
    if found is None:
        return None
    samples, stored, starts, ends, kinds, first, names = (np.frombuffer(column, np.int64) for column in found)
    if len(np.unique(names)) != len(names):
        return None  # a file named twice (or a hash collision): parse_index says which, or accepts it
    spans = np.stack([starts, ends], axis=1)  # (num_shards, 2)
    if not document.isascii():
        spans = _byte_offsets(document, spans)
    return IndexColumns(
        samples=samples.copy(),
        stored_bytes=stored.copy(),
        spans=spans,
        kind_per_shard=kinds.copy(),
        first_of_kind=first.copy(),
    )


def _find_tail(pattern: re.Pattern[str], document: str, start: int) -> int | None:
    """Where the closing ``]`` of the shard list is, when ``pattern`` matches the end of the text."""
    position = document.rfind("]", start)
    while position >= start:
        if pattern.fullmatch(document, position):
            return position
        position = document.rfind("]", start, position)
    return None


def _scan_entries(
    document: str, start: int, tail: int, *, source: str
) -> tuple[array[int], ...] | None:
    """Scan the shard entries between ``start`` and the list's closing bracket at ``tail``."""
    scan = JSONDecoder().scan_once  # type: ignore[attr-defined]  # what json.loads uses: same numbers, constants and strictness
    # Compact columns (8 bytes a number, not a Python int each) while a million entries go by.
    samples, stored, starts, ends, kinds, first, names = (array("q") for _ in range(7))
    known: dict[Any, int] = {}
    position = start
    if position == tail:
        return samples, stored, starts, ends, kinds, first, names
    while True:
        try:
            entry, end = scan(document, position)
        except (StopIteration, ValueError, RecursionError):
            return None
        number = len(samples)
        fields = _plain_entry(entry, names)
        if fields is None:  # unusual but perhaps valid: the full check, which raises if it is not
            parsed = parse_shard_entry(entry, source=f"{source} shard {number}")
            fields = (parsed.samples, stored_bytes(parsed))
            names.extend(hash(info.basename) for pair in parsed.file_pairs() for info in pair if info is not None)
        encodings = entry.get("column_encodings")
        try:  # a list of strings (the usual case) is its own key
            kind_key: Any = (entry["format"], *encodings)
            kind = known.setdefault(kind_key, len(known))
        except TypeError:
            kind_key = (entry["format"], "\0", *_encodings_key(entry))
            kind = known.setdefault(kind_key, len(known))
        if kind == len(first):
            first.append(number)
        samples.append(fields[0])
        stored.append(fields[1])
        starts.append(position)
        ends.append(end)
        kinds.append(kind)
        if document.startswith(", ", end) and document[end + 2 : end + 3] == "{":  # json.dumps's separator
            position = end + 2
            continue
        after = _AFTER_ENTRY.match(document, end)
        if after is None:
            return None
        if after.group(1) is not None:  # the closing bracket
            return (samples, stored, starts, ends, kinds, first, names) if after.start(1) == tail else None
        position = after.end()


def _byte_offsets(document: str, spans: np.ndarray) -> np.ndarray:
    """``spans`` (character offsets) as UTF-8 byte offsets of the text."""
    points = spans.reshape(-1)  # (2 * num_shards,), ascending
    result = np.empty_like(points)
    previous_char = previous_byte = 0
    for number, point in enumerate(points.tolist()):
        previous_byte += len(document[previous_char:point].encode("utf-8", "surrogatepass"))
        previous_char = point
        result[number] = previous_byte
    return result.reshape(spans.shape)  # (num_shards, 2)


class _EntrySequence(Sequence[ShardEntry]):
    """A sequence of shard entries built on demand: subclasses give ``__len__`` and ``_at`` (an index
    already checked to be in range)."""

    def _at(self, number: int) -> ShardEntry:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> ShardEntry: ...

    @overload
    def __getitem__(self, index: slice) -> list[ShardEntry]: ...

    def __getitem__(self, index: int | slice) -> ShardEntry | list[ShardEntry]:
        if isinstance(index, slice):
            return [self._at(number) for number in range(*index.indices(len(self)))]
        number = int(index)
        if number < 0:
            number += len(self)
        if not 0 <= number < len(self):
            raise IndexError(f"shard {index} of an index of {len(self)} shards")
        return self._at(number)


class LazyEntries(_EntrySequence):
    """The ``ShardEntry`` of each shard, parsed from its byte range of the index text when asked for.

    ``text`` is the index's bytes or a memory map of its file; pickling sends the file's path (and its
    ``os.stat`` identity, checked on arrival) rather than the bytes when there is a file.
    """

    def __init__(
        self,
        text: bytes | mmap.mmap,
        spans: np.ndarray,
        *,
        source: str,
        path: str | None = None,
        stat_key: tuple[int, ...] | None = None,
    ) -> None:
        self._text = text
        self._spans = spans
        self._source = source
        self._path = path
        self._stat_key = stat_key
        self._entry = lru_cache(maxsize=_ENTRY_CACHE)(self._build)

    @classmethod
    def of_file(cls, path: str, spans: np.ndarray, *, source: str, stat_key: tuple[int, ...]) -> LazyEntries:
        """Entries over a memory map of the index file at ``path``, which must still have ``stat_key``."""
        with open(path, "rb") as file:
            found = stat_key_of(os.fstat(file.fileno()))
            if found != stat_key:
                raise IndexFormatError(
                    f"{path}: expected the index.json the dataset was opened with (stat {stat_key}), found it "
                    f"changed (stat {found}); do not rewrite a dataset's index while it is read. Build the "
                    "dataset again to read the new index"
                )
            text: bytes | mmap.mmap = (
                mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if found[1] else b""
            )
        return cls(text, spans, source=source, path=path, stat_key=stat_key)

    def __len__(self) -> int:
        return len(self._spans)

    def _at(self, number: int) -> ShardEntry:
        return self._entry(number)

    def __iter__(self) -> Iterator[ShardEntry]:
        return (self._build(number) for number in range(len(self)))

    def _build(self, number: int) -> ShardEntry:
        start, end = self._spans[number].tolist()
        return parse_shard_entry(json.loads(self._text[start:end]), source=f"{self._source} shard {number}")

    def __reduce__(self) -> tuple[Any, ...]:
        if self._path is not None and self._stat_key is not None:
            return (_entries_of_file, (self._path, self._spans, self._source, self._stat_key))
        return (_entries_of_bytes, (bytes(self._text), self._spans, self._source))


def _entries_of_file(path: str, spans: np.ndarray, source: str, stat_key: tuple[int, ...]) -> LazyEntries:
    return LazyEntries.of_file(path, spans, source=source, stat_key=stat_key)


def _entries_of_bytes(text: bytes, spans: np.ndarray, source: str) -> LazyEntries:
    return LazyEntries(text, spans, source=source)


def stat_key_of(stat: os.stat_result) -> tuple[int, ...]:
    """What changes whenever a file is rewritten: a new inode (atomic rename) or new size and times."""
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class ConcatenatedEntries(_EntrySequence):
    """Several streams' entries as one sequence, numbered globally in stream order."""

    def __init__(self, parts: Sequence[Sequence[ShardEntry]]) -> None:
        self._parts = list(parts)
        self._offsets = np.cumsum([0] + [len(part) for part in self._parts])  # (num_parts + 1,)

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def _at(self, number: int) -> ShardEntry:
        part = int(np.searchsorted(self._offsets, number, side="right")) - 1
        return self._parts[part][number - int(self._offsets[part])]

    def __iter__(self) -> Iterator[ShardEntry]:
        for part in self._parts:
            yield from part


__all__ = [
    "ConcatenatedEntries",
    "IndexColumns",
    "LazyEntries",
    "columns_of",
    "index_digest",
    "parse_columns",
    "read_columns",
    "stat_key_of",
    "stored_bytes",
]
