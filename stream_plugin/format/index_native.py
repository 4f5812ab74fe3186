"""The columns of an ``index.json`` in the usual layout, scanned by msgspec's native JSON decoder.

This is the fast path of ``index_columns.parse_columns``: about 2 CPU s for a million shards where the
JSON module's scanner takes about 5. It makes two passes over the shard list:

1. each entry's length in bytes (a ``msgspec.Raw`` per entry); the entries must then tile the list,
   one separator repeated between them, which fixes each entry's byte range in the file;
2. the entries a chunk at a time, decoded into small typed structs that check in C what
   ``parse_shard_entry`` checks of an ordinary entry; the few checks left (basenames, samples against
   bytes, files named twice) run on numpy arrays. A chunk with an unusual entry (a non-ASCII name,
   say) is checked entry by entry by ``parse_shard_entry`` itself.

It accepts only what ``parse_index`` accepts, with the same values: the bytes must be UTF-8 (as
``json.loads`` requires; msgspec does not check skipped strings), and anything else it cannot vouch
for (another layout, ``NaN``, a lone surrogate, an invalid entry, an index unusual from its first
chunk on) returns None, so that the caller falls back on the JSON module's scanner and
``parse_index``'s error messages.
"""

from __future__ import annotations

import codecs
import mmap
import re
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Annotated, Any

import msgspec
import numpy as np

from stream_plugin.errors import IndexFormatError
from stream_plugin.format.index import INDEX_BASENAME, MAX_FILE_BYTES, SHARD_FORMATS, parse_shard_entry
from stream_plugin.format.shard_columns import (
    AFTER_ENTRY,
    BASENAME_FIRST,
    BASENAME_REST,
    HEAD_SHARDS_FIRST,
    HEAD_VERSION_FIRST,
    TAIL_CHARS,
    TAIL_SHARDS_FIRST,
    TAIL_VERSION_FIRST,
    WS,
    IndexColumns,
    stored_bytes,
)

_HEAD_SHARDS_FIRST = re.compile(HEAD_SHARDS_FIRST.encode())
_HEAD_VERSION_FIRST = re.compile(HEAD_VERSION_FIRST.encode())
# The tail patterns match at one ']' only (the list's last), so the first match from the left is it.
_TAIL_SHARDS_FIRST = re.compile(TAIL_SHARDS_FIRST.encode() + rb"\Z")
_TAIL_VERSION_FIRST = re.compile(TAIL_VERSION_FIRST.encode() + rb"\Z")
_AFTER_ENTRY = re.compile(AFTER_ENTRY.encode())
_WS = re.compile(WS.encode())
_MAX_SEPARATOR = 256  # bytes between two entries ('", "', or a newline and an indent)
_CHUNK_ENTRIES = 1 << 16  # entries decoded at once (about 30 MB of structs)
_CHUNK_BYTES = 1 << 24  # bytes checked as UTF-8 at once
_HIGH_BITS = 0x8080808080808080  # the high bit of each byte of a 64-bit word
_FORMATS = frozenset(SHARD_FORMATS)


def _table(characters: str) -> np.ndarray:
    """A (256,) bool lookup table: which byte values are among ``characters`` (ASCII)."""
    table = np.zeros(256, bool)
    table[list(characters.encode("ascii"))] = True
    return table


_FIRST = _table(BASENAME_FIRST)
_SEPARATOR = _table("/\n")  # between two components, or (joined here) two names
_ALLOWED = _table(BASENAME_REST + "/\n")


class _File(msgspec.Struct, gc=False):
    """A file of a shard, as ``_file_info`` accepts it without a closer look at its basename."""

    basename: str
    bytes: Annotated[int, msgspec.Meta(ge=0, le=MAX_FILE_BYTES)]
    hashes: dict[str, str] | None = None


class _Entry(msgspec.Struct, gc=False):
    """A shard entry, as ``parse_shard_entry`` accepts it (other keys are not looked at here)."""

    format: str
    samples: Annotated[int, msgspec.Meta(ge=0)]
    raw_data: _File
    zip_data: _File | None = None
    raw_meta: _File | None = None
    zip_meta: _File | None = None
    hashes: list[str] | None = None
    compression: str | None = None
    column_encodings: tuple[str, ...] | None = None


# (format, column encodings): shards that share a column layout (3 items for unusual encodings)
_Kind = tuple[str, tuple[str, ...] | None] | tuple[str, None, str]
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_ENTRY_LIST = msgspec.json.Decoder(list[_Entry])
_ANY_LIST = msgspec.json.Decoder(list[Any])
_BYTES, _BASENAME = attrgetter("bytes"), attrgetter("basename")
_FORMAT, _SAMPLES, _ENCODINGS = attrgetter("format"), attrgetter("samples"), attrgetter("column_encodings")
_RAW_DATA, _ZIP_DATA = attrgetter("raw_data"), attrgetter("zip_data")
_RAW_META, _ZIP_META = attrgetter("raw_meta"), attrgetter("zip_meta")


def native_columns(data: bytes | mmap.mmap) -> IndexColumns | None:
    """The columns of the index ``data`` (its bytes, or a read-only map of its file), or None when the
    JSON module's scanner must do it."""
    if not _is_utf8(data):
        return None
    head = _HEAD_SHARDS_FIRST.match(data) or _HEAD_VERSION_FIRST.match(data)
    if head is None:
        return None
    tail_pattern = _TAIL_SHARDS_FIRST if head.re is _HEAD_SHARDS_FIRST else _TAIL_VERSION_FIRST
    tail = tail_pattern.search(data, max(head.end(), len(data) - TAIL_CHARS))
    if tail is None:
        return None
    view = memoryview(data)
    try:
        raws = _RAW_LIST.decode(view[data.rfind(b"[", 0, head.end()) : tail.start() + 1])
        lengths = np.fromiter(map(len, raws), np.int64, len(raws))
        del raws
        spans = _tile(data, lengths, head.end(), tail.start())
        return None if spans is None else _decode(view, spans)
    except (msgspec.DecodeError, OverflowError, RecursionError):  # not for us: a number past int64, deep nesting
        return None


def _is_ascii(data: bytes | mmap.mmap) -> bool:
    """Whether no byte of ``data`` has its high bit set; a map is read as 8-byte words, not copied."""
    if isinstance(data, bytes):
        return data.isascii()
    whole = len(data) // 8
    high = int(np.bitwise_or.reduce(np.frombuffer(data, np.uint64, count=whole)))  # 0 when empty
    return not high & _HIGH_BITS and data[whole * 8 :].isascii()


def _is_utf8(data: bytes | mmap.mmap) -> bool:
    """Whether ``json.loads`` can decode ``data`` (UTF-8, with surrogates as it allows them)."""
    if _is_ascii(data):
        return True
    decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
    view = memoryview(data)
    try:
        for start in range(0, len(data), _CHUNK_BYTES):
            decoder.decode(view[start : start + _CHUNK_BYTES])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _tile(data: bytes | mmap.mmap, lengths: np.ndarray, first: int, tail: int) -> np.ndarray | None:
    """Each entry's byte range, when the entries (``lengths`` bytes each, from ``first``) are objects
    separated by one repeated separator and followed by whitespace up to the list's end at ``tail``.

    Each entry is checked to start with ``{`` right after the separator; as a separator is whitespace
    around one comma, that proves by induction that the ranges are those of the real entries.
    """
    count = len(lengths)
    if not count:
        return np.empty((0, 2), np.int64)
    separator = b""
    if count > 1:
        after = _AFTER_ENTRY.match(data, first + int(lengths[0]))
        if after is None or after.group(1) is not None:
            return None
        separator = data[after.start() : after.end()]
        if len(separator) > _MAX_SEPARATOR:
            return None
    starts = np.empty(count, np.int64)  # (num_shards,)
    starts[0] = first
    np.cumsum(lengths[:-1] + len(separator), out=starts[1:])
    starts[1:] += first
    ends = starts + lengths  # (num_shards,)
    if int(ends[-1]) > tail:
        return None
    codes = np.frombuffer(data, np.uint8)
    if not (codes[starts] == ord("{")).all():
        return None
    for offset, byte in enumerate(separator):
        if not (codes[starts[1:] - len(separator) + offset] == byte).all():
            return None
    if _WS.fullmatch(data, int(ends[-1]), tail) is None:
        return None
    return np.stack([starts, ends], axis=1)  # (num_shards, 2)


def _decode(view: memoryview, spans: np.ndarray) -> IndexColumns | None:
    """Decode and check the entries at ``spans`` a chunk at a time; their columns."""
    known: dict[_Kind, int] = {}
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for begin in range(0, len(spans), _CHUNK_ENTRIES):
        stop = min(begin + _CHUNK_ENTRIES, len(spans))
        text = b"".join((b"[", view[int(spans[begin, 0]) : int(spans[stop - 1, 1])], b"]"))
        try:
            entries = _ENTRY_LIST.decode(text)
            part = _chunk_columns(entries, known) if len(entries) == stop - begin else None
        except msgspec.ValidationError:
            part = None
        if part is None:  # an unusual entry (or an invalid one): check the chunk's entries one by one
            if begin == 0 and stop < len(spans):
                return None  # unusual from the first chunk on: likely throughout, which the JSON module's scanner does faster
            part = _entry_by_entry(text, known)
            if part is None:
                return None
        parts.append(part)
    samples, stored, kinds, names = (
        np.concatenate([np.zeros(0, np.int64)] + [part[field] for part in parts]) for field in range(4)
    )
    names.sort()
    if (names[1:] == names[:-1]).any():
        return None  # a file named twice (or a hash collision): parse_index says which, or accepts it
    first_of_kind = np.unique(kinds, return_index=True)[1].astype(np.int64)  # ids count up from 0
    return IndexColumns(
        samples=samples, stored_bytes=stored, spans=spans, kind_per_shard=kinds, first_of_kind=first_of_kind
    )


def _chunk_columns(
    entries: list[_Entry], known: dict[_Kind, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(samples, stored bytes, kind, hashes of the file names)`` of decoded entries; None when an
    entry needs ``parse_shard_entry`` itself. ``known`` numbers the kinds across chunks."""
    count = len(entries)
    keys = list(zip(map(_FORMAT, entries), map(_ENCODINGS, entries)))  # each entry's kind
    kinds = _kind_ids(keys, known)
    if kinds is None:
        return None
    samples = np.fromiter(map(_SAMPLES, entries), np.int64, count)
    raw_data, zip_data, raw_meta, zip_meta = (
        _file_column(list(map(field, entries))) for field in (_RAW_DATA, _ZIP_DATA, _RAW_META, _ZIP_META)
    )
    if not _all_plain(raw_data.names + zip_data.names + raw_meta.names + zip_meta.names):
        return None
    if (samples > raw_data.sizes + raw_meta.sizes).any():  # parse_shard_entry refuses these
        return None
    # A compressed meta file without a raw one is not a file of the shard (ShardEntry.file_pairs).
    meta_pairs = raw_meta.present[zip_meta.present]  # (number of zip_meta names,)
    stored = raw_data.sizes + zip_data.sizes + raw_meta.sizes + np.where(raw_meta.present, zip_meta.sizes, 0)
    names = raw_data.names + zip_data.names + raw_meta.names
    names += [name for name, paired in zip(zip_meta.names, meta_pairs.tolist()) if paired]
    return samples, stored, kinds, np.fromiter(map(hash, names), np.int64, len(names))


def _entry_by_entry(text: bytes, known: dict[_Kind, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """What ``_chunk_columns`` returns for the entries of ``text`` (a JSON list), each decoded as plain
    Python values (as the JSON module decodes them: the first pass refused ``NaN`` and lone surrogates)
    and checked by ``parse_shard_entry`` itself; None when one is invalid (``parse_index`` says why)."""
    samples: list[int] = []
    stored: list[int] = []
    keys: list[_Kind] = []
    names: list[int] = []
    for config in _ANY_LIST.decode(text):
        try:
            entry = parse_shard_entry(config, source=INDEX_BASENAME)
        except IndexFormatError:
            return None
        samples.append(entry.samples)
        stored.append(stored_bytes(entry))
        keys.append(_kind_of(entry.format, config.get("column_encodings")))
        names.extend(hash(info.basename) for pair in entry.file_pairs() for info in pair if info is not None)
    kinds = _kind_ids(keys, known)
    if kinds is None:
        return None
    return np.array(samples, np.int64), np.array(stored, np.int64), kinds, np.array(names, np.int64)


def _kind_of(shard_format: str, encodings: Any) -> _Kind:
    """The kind key ``_Entry`` gives an entry, for an entry read by the JSON module: column encodings
    that are not a list of strings make a key no list can share (3 items, not 2)."""
    if encodings is None:
        return shard_format, None
    if type(encodings) is list and all(type(name) is str for name in encodings):
        return shard_format, tuple(encodings)
    return shard_format, None, repr(encodings)


def _kind_ids(keys: Sequence[_Kind], known: dict[_Kind, int]) -> np.ndarray | None:
    """The id of each entry's kind, numbered in order of first appearance across chunks (``known``):
    int64 (k,); None when a kind's format is not one of ``SHARD_FORMATS``."""
    distinct = [keys[0]] if keys and keys.count(keys[0]) == len(keys) else list(dict.fromkeys(keys))
    for key in distinct:
        if key not in known:
            if key[0] not in _FORMATS:
                return None
            known[key] = len(known)
    if len(distinct) == 1:  # the usual chunk: one kind
        return np.full(len(keys), known[distinct[0]], np.int64)
    return np.fromiter(map(known.__getitem__, keys), np.int64, len(keys))


@dataclass(frozen=True)
class _FileColumn:
    """One file field of a chunk of entries: each entry's size (0 without the file), whether it has
    one, and the basenames of those that do."""

    sizes: np.ndarray  # int64 (num_entries,)
    present: np.ndarray  # bool (num_entries,)
    names: list[str]


def _file_column(files: Sequence[_File | None]) -> _FileColumn:
    count, missing = len(files), files.count(None)
    if missing == count:
        return _FileColumn(np.zeros(count, np.int64), np.zeros(count, bool), [])
    if not missing:
        sizes = np.fromiter(map(_BYTES, files), np.int64, count)
        return _FileColumn(sizes, np.ones(count, bool), list(map(_BASENAME, files)))
    present = [file for file in files if file is not None]
    sizes = np.zeros(count, np.int64)
    mask = np.fromiter((file is not None for file in files), bool, count)
    sizes[mask] = np.fromiter(map(_BYTES, present), np.int64, len(present))
    return _FileColumn(sizes, mask, list(map(_BASENAME, present)))


def _all_plain(names: list[str]) -> bool:
    """Whether every name is a basename ``check_basename`` accepts as it stands (``PLAIN_BASENAME``):
    components of BASENAME_REST characters, each starting with one of BASENAME_FIRST."""
    if not names:
        return True
    joined = "\n".join(names)
    if not joined or not joined.isascii() or joined.count("\n") != len(names) - 1:
        return False  # an empty name, a non-ASCII one, or one with a newline of its own
    codes = np.frombuffer(joined.encode("ascii"), np.uint8)
    if not _ALLOWED[codes].all():
        return False
    starts = np.flatnonzero(_SEPARATOR[codes]) + 1  # where each component after the first starts
    if starts.size and starts[-1] == len(codes):
        return False  # a name ending with '/'
    return bool(_FIRST[codes[0]]) and bool(_FIRST[codes[starts]].all())


__all__ = ["native_columns"]
