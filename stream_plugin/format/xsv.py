"""CSV / TSV / XSV shards (spec section 6): a header line, one unquoted line per sample, a ``.meta`` file.

Values are not quoted, so the writer refuses any value holding the separator or the newline instead of
writing a file that reads back wrong.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from stream_plugin.errors import ConfigError, EncodingError, ShardIntegrityError
from stream_plugin.format.encodings import check_text_column_types, decode_text_value, encode_text_value
from stream_plugin.format.index import ShardEntry
from stream_plugin.format.shard_file import SplitShardReader

FORMAT_SEPARATORS = {"csv": ",", "tsv": "\t"}


def check_xsv_columns(
    columns: Mapping[str, str], *, separator: str, newline: str, writer: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Validate columns, separator and newline; return (sorted names, their types)."""
    if not isinstance(columns, Mapping) or not columns:
        raise ConfigError(
            f"{writer} columns: expected a non-empty dict of column name -> 'str'/'int'/'float', "
            f"found {columns!r:.80}"
        )
    if not isinstance(separator, str) or not separator or not isinstance(newline, str) or not newline:
        raise ConfigError(
            f"{writer}: expected non-empty string separator and newline, found {separator!r} and "
            f"{newline!r}; pass e.g. separator='|', newline='\\n'"
        )
    if separator in newline or newline in separator:
        raise ConfigError(
            f"{writer}: expected a separator and a newline that do not contain each other, found "
            f"{separator!r} and {newline!r}; choose different ones"
        )
    check_text_column_types(columns, fmt=writer)
    names = tuple(sorted(columns))
    for name in names:
        if separator in name or newline in name:
            raise ConfigError(
                f"{writer}: expected column names without the separator {separator!r} or newline "
                f"{newline!r} (they form the header line), found {name!r}; rename the column"
            )
    return names, tuple(columns[name] for name in names)


def header_line(names: tuple[str, ...], separator: str, newline: str) -> bytes:
    """The first line of every data file: the sorted column names."""
    return (separator.join(names) + newline).encode("utf-8")


def make_xsv_encoder(
    names: tuple[str, ...], types: tuple[str, ...], *, separator: str, newline: str, writer: str
) -> Callable[[Mapping[str, Any]], bytes]:
    """Return a function that turns one sample into its line (UTF-8, newline included)."""
    fields = tuple(zip(names, types))

    def encode_sample(sample: Mapping[str, Any]) -> bytes:
        values = []
        for name, type_name in fields:
            if name not in sample:
                raise EncodingError(
                    f"{writer}: expected every column {list(names)} in the sample, found it lacks "
                    f"{[column for column in names if column not in sample]}; add the missing keys"
                )
            text = encode_text_value(type_name, sample[name], column=name)
            if separator in text or newline in text:
                raise EncodingError(
                    f"{writer} column {name!r}: expected a value without the separator {separator!r} or "
                    f"the newline {newline!r} (values are not quoted), found {text[:80]!r}; clean the "
                    "value, or write the dataset with JSONWriter or MDSWriter"
                )
            values.append(text)
        return (separator.join(values) + newline).encode("utf-8")

    return encode_sample


def entry_layout(entry: ShardEntry) -> tuple[tuple[str, ...], tuple[str, ...], str, str]:
    """Column names, types, separator and newline of a CSV/TSV/XSV shard entry."""
    config = entry.config
    names, types = config.get("column_names"), config.get("column_encodings")
    separator = FORMAT_SEPARATORS.get(entry.format, config.get("separator"))
    newline = config.get("newline", "\n")
    if not (
        isinstance(names, list)
        and isinstance(types, list)
        and len(names) == len(types)
        and isinstance(separator, str)
        and separator
        and isinstance(newline, str)
    ):
        raise ShardIntegrityError(
            f"{entry.format} shard {entry.raw_data.basename}: expected column_names and column_encodings "
            f"of equal length, a separator and a newline in its index entry, found {names!r:.60}, "
            f"{types!r:.60}, {separator!r}, {newline!r}; regenerate the index"
        )
    check_text_column_types(dict(zip(names, types)), fmt=f"{entry.format} shard {entry.raw_data.basename}")
    return tuple(names), tuple(types), separator, newline


class XSVShardReader(SplitShardReader):
    """Samples of a raw CSV/TSV/XSV shard, decoded to ``str``/``int``/``float`` per column type."""

    def __init__(self, entry: ShardEntry, folder: str | os.PathLike[str]) -> None:
        self.column_names, self._types, self._separator, self._newline = entry_layout(entry)
        header = header_line(self.column_names, self._separator, self._newline)
        super().__init__(entry, folder, first_offset=len(header))

    def decode(self, data: bytes) -> dict[str, Any]:
        text = data.decode("utf-8")[: -len(self._newline)]
        parts = text.split(self._separator)
        if len(parts) != len(self.column_names):
            raise ShardIntegrityError(
                f"{self._source}: expected {len(self.column_names)} values separated by "
                f"{self._separator!r}, found {len(parts)} in {text[:80]!r}; the shard is corrupt, "
                "download it again"
            )
        return {
            name: decode_text_value(type_name, part)
            for name, type_name, part in zip(self.column_names, self._types, parts)
        }
