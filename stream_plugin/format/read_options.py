"""How a shard reader hands out column values: images as PIL or tensors, ``bytes`` copied or as views.

``ReadOptions`` is the one value a reader takes for this (``StreamingDataset(decode=, zero_copy=)`` builds
it). It changes what a value is, never which bytes are read: the shards stay MosaicML's.

- ``decode``: ``"pil"`` (the default, MosaicML's) or ``"tensor"`` (``image_decode``) for every image
  column, or a mapping of column name to one of them (columns not named stay ``"pil"``).
- ``zero_copy``: ``bytes`` columns come back as read-only ``memoryview``s of the shard's memory map
  instead of copies. A view keeps the map alive: it stays valid (and equal) after the reader closes the
  shard and after the cache evicts the file, until the last view of that shard is released; until
  then the evicted file's disk space is not freed. ``bytes(view)`` makes a copy that holds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stream_plugin.errors import ConfigError, ConfigTypeError
from stream_plugin.format.encodings import ColumnEncoding, keep_view, with_image_decoder
from stream_plugin.format.image_decode import IMAGE_DECODES, TENSOR_DECODABLE, decode_image_tensor
from stream_plugin.format.index import ShardEntry

__all__ = ["DEFAULT_READ_OPTIONS", "ReadOptions", "check_decode_columns", "normalize_decode"]

DecodeSetting = str | tuple[tuple[str, str], ...]  # one choice for every image column, or (column, choice)s


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


@dataclass(frozen=True)
class ReadOptions:
    """What the values of a shard's columns are; see the module docstring."""

    decode: DecodeSetting = "pil"
    zero_copy: bool = False

    def __post_init__(self) -> None:
        if normalize_decode(self.decode) != self.decode:
            raise ConfigError(
                f"ReadOptions.decode: expected a normalized value, found {self.decode!r}; build it with "
                "normalize_decode(...)"
            )
        if not isinstance(self.zero_copy, bool):
            raise ConfigTypeError(
                f"zero_copy: expected True or False, found {type(self.zero_copy).__name__} {self.zero_copy!r}"
            )

    def decode_of(self, column: str) -> str:
        """The decode choice for ``column``."""
        if isinstance(self.decode, str):
            return self.decode
        return dict(self.decode).get(column, "pil")

    def encodings(self, names: Sequence[str], encodings: Sequence[ColumnEncoding]) -> tuple[ColumnEncoding, ...]:
        """``encodings`` (of the columns ``names``) with their decoders as these options ask."""
        return tuple(self._encoding(name, encoding) for name, encoding in zip(names, encodings))

    def _encoding(self, column: str, encoding: ColumnEncoding) -> ColumnEncoding:
        if self.zero_copy and encoding.decode is bytes:
            return ColumnEncoding(encoding.name, encoding.encode, keep_view)
        if encoding.name in TENSOR_DECODABLE and self.decode_of(column) == "tensor":
            return with_image_decoder(encoding, decode_image_tensor)
        return encoding


DEFAULT_READ_OPTIONS = ReadOptions()


def check_decode_columns(decode: DecodeSetting, entries: Sequence[ShardEntry], *, source: str) -> None:
    """Refuse a ``decode`` mapping that names a column no shard has, or one that holds no images.

    ``entries``: a shard of each column layout of the dataset (its streams' representatives)."""
    if isinstance(decode, str):
        return
    found: dict[str, set[str]] = {}
    for entry in entries:
        for column, encoding in _stored_columns(entry).items():
            found.setdefault(column, set()).add(encoding)
    for column, choice in decode:
        encodings = found.get(column)
        if encodings is None:
            raise ConfigError(
                f"{source}: decode names column {column!r}, expected one of the dataset's columns "
                f"{sorted(found)}; fix the name"
            )
        others = sorted(encodings - set(TENSOR_DECODABLE))
        if choice == "tensor" and others:
            raise ConfigError(
                f"{source}: decode={{{column!r}: 'tensor'}} expects an image column (encoding in "
                f"{list(TENSOR_DECODABLE)}), found encoding {others[0]!r}; name an image column, or drop "
                f"{column!r} from decode"
            )


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
