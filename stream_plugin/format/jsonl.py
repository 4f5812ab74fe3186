"""JSON-lines shards (spec section 5): one sorted-key JSON object per line plus a ``.meta`` offset file."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from stream_plugin.errors import ConfigError, EncodingError, ShardIntegrityError
from stream_plugin.format.encodings import check_text_column_types, encode_text_value
from stream_plugin.format.index import ShardEntry
from stream_plugin.format.shard_file import SplitShardReader

# What each text column type stores in JSON; int and float are normalised so numpy numbers serialise.
_JSON_VALUE = {"str": str, "int": int, "float": float}


def check_json_columns(columns: Mapping[str, str]) -> dict[str, str]:
    """Validate the ``columns`` argument of ``JSONWriter`` (name -> ``str``/``int``/``float``)."""
    if not isinstance(columns, Mapping) or not columns:
        raise ConfigError(
            f"JSONWriter columns: expected a non-empty dict of column name -> 'str'/'int'/'float', "
            f"found {columns!r:.80}"
        )
    check_text_column_types(columns, fmt="JSONWriter")
    return dict(columns)


def make_json_encoder(columns: Mapping[str, str], newline: str) -> Callable[[Mapping[str, Any]], bytes]:
    """Return a function that turns one sample into its JSON line (UTF-8, newline included)."""
    fields = tuple((name, type_name, _JSON_VALUE[type_name]) for name, type_name in columns.items())

    def encode_sample(sample: Mapping[str, Any]) -> bytes:
        record = {}
        for name, type_name, convert in fields:
            if name not in sample:
                raise EncodingError(
                    f"JSONWriter: expected every column {list(columns)} in the sample, found it lacks "
                    f"{[column for column in columns if column not in sample]}; add the missing keys"
                )
            value = sample[name]
            if type(value) is not convert:  # the common case skips the type check entirely
                encode_text_value(type_name, value, column=name)  # raises on a wrong type
                value = convert(value)
            record[name] = value
        return (json.dumps(record, sort_keys=True) + newline).encode("utf-8")

    return encode_sample


class JSONShardReader(SplitShardReader):
    """Samples of a raw JSON-lines shard; each comes back as ``json.loads`` returns its line."""

    def __init__(self, entry: ShardEntry, folder: str | os.PathLike[str]) -> None:
        columns = entry.config.get("columns")
        newline = entry.config.get("newline", "\n")
        if not isinstance(columns, dict) or not isinstance(newline, str):
            raise ShardIntegrityError(
                f"JSON shard {entry.raw_data.basename}: expected 'columns' (an object) and 'newline' (a "
                f"string) in its index entry, found {columns!r:.60} and {newline!r}; regenerate the index"
            )
        self.column_names = tuple(columns)
        self._newline_size = len(newline.encode("utf-8"))
        super().__init__(entry, folder, first_offset=0)

    def decode(self, data: bytes) -> dict[str, Any]:
        try:
            return json.loads(data[: len(data) - self._newline_size])
        except ValueError as error:
            raise ShardIntegrityError(
                f"{self._source}: expected one JSON object per sample, found {data[:60]!r} ({error}); the "
                "shard is corrupt, download it again"
            ) from error
