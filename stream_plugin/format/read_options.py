"""How a shard reader hands out column values: images as PIL or tensors, ``bytes`` copied or as views.

``ReadOptions`` is the one value a reader takes for this (``StreamingDataset(decode=, zero_copy=)`` builds
it). It changes what a value is, never which bytes are read: the shards stay MosaicML's.

- ``decode``: ``"pil"`` (the default, MosaicML's) or ``"tensor"`` (``image_decode``) for every image
  column, or a mapping of column name to one of them (columns not named stay ``"pil"``).
- ``zero_copy``: ``bytes`` columns come back as read-only ``memoryview``s of the shard's memory map
  instead of copies: ``True`` for every ``bytes`` column, or a list of column names (only those; the
  others stay copies). A view keeps the map alive: it stays valid (and equal) after the reader closes
  the shard and after the cache evicts the file, until the last view of that shard is released; until
  then the evicted file's disk space is not freed. ``bytes(view)`` makes a copy that holds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stream_plugin.errors import ConfigError, ConfigTypeError
from stream_plugin.format.encodings import ColumnEncoding, keep_view, with_image_decoder
from stream_plugin.format.image_decode import IMAGE_DECODES, TENSOR_DECODABLE, TENSOR_DECODERS
from stream_plugin.format.index import ShardEntry

__all__ = [
    "DEFAULT_READ_OPTIONS",
    "ReadOptions",
    "ZeroCopySetting",
    "check_decode_columns",
    "check_zero_copy_columns",
    "normalize_decode",
    "normalize_zero_copy",
]

DecodeSetting = str | tuple[tuple[str, str], ...]  # one choice for every image column, or (column, choice)s
ZeroCopySetting = bool | tuple[str, ...]  # every bytes column, or the sorted names of the ones viewed


def normalize_decode(decode: object) -> DecodeSetting:
    """The ``decode`` argument as a frozen value: a choice, or sorted ``(column, choice)`` pairs."""
    if isinstance(decode, str):
        _check_choice("decode", decode)
        return decode
    if isinstance(decode, tuple) and all(isinstance(pair, tuple) and len(pair) == 2 for pair in decode):
        decode = dict(decode)
    if not isinstance(decode, Mapping):
        raise ConfigTypeError(
            f"decode: expected one of {list(IMAGE_DECODES)} or a dict of column name -> one of them, found "
            f"{type(decode).__name__} {decode!r:.80}; pass e.g. decode='tensor' or decode={{'image': 'tensor'}}"
        )
    for column, choice in decode.items():
        if not isinstance(column, str):
            raise ConfigTypeError(
                f"decode: expected str column names, found {type(column).__name__} {column!r}; name the column"
            )
        _check_choice(f"decode[{column!r}]", choice)
    return tuple(sorted(decode.items()))


def _check_choice(name: str, choice: object) -> None:
    if choice not in IMAGE_DECODES:
        raise ConfigError(
            f"{name}: expected one of {list(IMAGE_DECODES)}, found {choice!r}; 'pil' gives PIL images "
            "(MosaicML's), 'tensor' uint8 tensors of shape (C, H, W)"
        )


def normalize_zero_copy(zero_copy: object) -> ZeroCopySetting:
    """The ``zero_copy`` argument as a frozen value: a bool, or the sorted, distinct column names (an
    empty list is ``False``)."""
    if isinstance(zero_copy, bool):
        return zero_copy
    if not isinstance(zero_copy, (list, tuple, set, frozenset)):
        raise ConfigTypeError(
            f"zero_copy: expected True, False or a list of bytes column names, found "
            f"{type(zero_copy).__name__} {zero_copy!r:.80}; pass e.g. zero_copy=True or zero_copy=['payload']"
        )
    for column in zero_copy:
        if not isinstance(column, str):
            raise ConfigTypeError(
                f"zero_copy: expected str column names, found {type(column).__name__} {column!r}; name the column"
            )
    return tuple(sorted(set(zero_copy))) or False


@dataclass(frozen=True)
class ReadOptions:
    """What the values of a shard's columns are; see the module docstring."""

    decode: DecodeSetting = "pil"
    zero_copy: ZeroCopySetting = False

    def __post_init__(self) -> None:
        if normalize_decode(self.decode) != self.decode:
            raise ConfigError(
                f"ReadOptions.decode: expected a normalized value, found {self.decode!r}; build it with "
                "normalize_decode(...)"
            )
        if normalize_zero_copy(self.zero_copy) != self.zero_copy:
            raise ConfigError(
                f"ReadOptions.zero_copy: expected a normalized value, found {self.zero_copy!r}; build it with "
                "normalize_zero_copy(...)"
            )

    def decode_of(self, column: str) -> str:
        """The decode choice for ``column``."""
        if isinstance(self.decode, str):
            return self.decode
        return dict(self.decode).get(column, "pil")

    def zero_copy_of(self, column: str) -> bool:
        """Whether ``column``'s values are views of the shard's map (when it is a ``bytes`` column)."""
        if isinstance(self.zero_copy, bool):
            return self.zero_copy
        return column in self.zero_copy

    def encodings(self, names: Sequence[str], encodings: Sequence[ColumnEncoding]) -> tuple[ColumnEncoding, ...]:
        """``encodings`` (of the columns ``names``) with their decoders as these options ask."""
        return tuple(self._encoding(name, encoding) for name, encoding in zip(names, encodings))

    def _encoding(self, column: str, encoding: ColumnEncoding) -> ColumnEncoding:
        if encoding.decode is bytes and self.zero_copy_of(column):
            return ColumnEncoding(encoding.name, encoding.encode, keep_view)
        if encoding.name in TENSOR_DECODERS and self.decode_of(column) == "tensor":
            return with_image_decoder(encoding, TENSOR_DECODERS[encoding.name])
        return encoding


DEFAULT_READ_OPTIONS = ReadOptions()


def check_decode_columns(decode: DecodeSetting, entries: Sequence[ShardEntry], *, source: str) -> None:
    """Refuse a ``decode`` mapping that names a column no shard has, or one that holds no images.

    ``entries``: a shard of each column layout of the dataset (its streams' representatives)."""
    if isinstance(decode, str):
        return
    found = _columns_of(entries)
    for column, choice in decode:
        encodings = _encodings_of(found, column, option="decode", source=source)
        others = sorted(encodings - set(TENSOR_DECODABLE))
        if choice == "tensor" and others:
            raise ConfigError(
                f"{source}: decode={{{column!r}: 'tensor'}} expects an image column (encoding in "
                f"{list(TENSOR_DECODABLE)}), found encoding {others[0]!r}; name an image column, or drop "
                f"{column!r} from decode"
            )


def check_zero_copy_columns(zero_copy: ZeroCopySetting, entries: Sequence[ShardEntry], *, source: str) -> None:
    """Refuse a ``zero_copy`` list that names a column no shard has, or one not ``bytes`` encoded.

    ``entries``: a shard of each column layout of the dataset (its streams' representatives)."""
    if isinstance(zero_copy, bool):
        return
    found = _columns_of(entries)
    for column in zero_copy:
        encodings = _encodings_of(found, column, option="zero_copy", source=source)
        others = sorted(encodings - {"bytes"})
        if others:
            raise ConfigError(
                f"{source}: zero_copy=[{column!r}] expects a 'bytes' column (only bytes values can be "
                f"views of the shard), found encoding {others[0]!r}; name a bytes column, or drop "
                f"{column!r} from zero_copy"
            )


def _encodings_of(found: dict[str, set[str]], column: str, *, option: str, source: str) -> set[str]:
    """The encodings of ``column``, named by ``option``; a ``ConfigError`` when no shard has it."""
    encodings = found.get(column)
    if encodings is None:
        raise ConfigError(
            f"{source}: {option} names column {column!r}, expected one of the dataset's columns "
            f"{sorted(found)}; fix the name"
        )
    return encodings


def _columns_of(entries: Sequence[ShardEntry]) -> dict[str, set[str]]:
    """Column name -> the encodings (or types) it has across ``entries``."""
    found: dict[str, set[str]] = {}
    for entry in entries:
        for column, encoding in _stored_columns(entry).items():
            found.setdefault(column, set()).add(encoding)
    return found


def _stored_columns(entry: ShardEntry) -> dict[str, str]:
    """Column name -> encoding (MDS) or type (the text formats) of a shard entry."""
    config = entry.config
    names, encodings = config.get("column_names"), config.get("column_encodings")
    if isinstance(names, list) and isinstance(encodings, list):
        return {str(name): str(encoding) for name, encoding in zip(names, encodings)}
    columns = config.get("columns")
    if isinstance(columns, Mapping):
        return {str(name): str(kind) for name, kind in columns.items()}
    return {}
