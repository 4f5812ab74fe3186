"""Arrow columns to sample values, a whole column chunk at a time (never ``.as_py()`` per cell).

Each column of a decoded row group becomes a numpy array (numbers, bools, timestamps, dates: one value
per row), a ``BufferColumn`` (strings and binary without nulls: the Arrow buffers, each row sliced when
read) or a Python list (structs, maps, nested lists, lists of numbers as ndarray views, the Hub's
``Image`` feature as PIL images on read, any column with nulls). ``check_schema`` refuses, before
anything is read, a type this module cannot decode, naming the column and its Arrow type.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream_plugin.errors import FormatError
from stream_plugin.format.encodings import get_encoding
from stream_plugin.parquet.arrow import pa

Values = np.ndarray | list[Any]


class UnsupportedColumnError(FormatError):
    """A Parquet column of an Arrow type no sample value is made from."""


def hub_features(schema: pa.Schema) -> dict[str, str]:
    """The Hugging Face feature type (``"Image"``, ``"Audio"``, ...) of each column the Hub's metadata
    names (``datasets`` writes it under the schema's ``huggingface`` key)."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is None:
        return {}
    try:
        features = json.loads(raw)["info"]["features"]
    except (ValueError, KeyError, TypeError):
        return {}
    if not isinstance(features, dict):
        return {}
    return {name: str(spec.get("_type")) for name, spec in features.items() if isinstance(spec, dict)}


def _is_numeric(arrow_type: pa.DataType) -> bool:
    return pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_boolean(arrow_type)


def _is_number_list(arrow_type: pa.DataType) -> bool:
    is_list = pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type)
    return is_list and _is_numeric(arrow_type.value_type) and not pa.types.is_boolean(arrow_type.value_type)


_NEWER_UNSUPPORTED = ("is_run_end_encoded", "is_list_view", "is_large_list_view")


def _never(arrow_type: pa.DataType) -> bool:
    return False


def _unsupported(arrow_type: pa.DataType) -> bool:
    if isinstance(arrow_type, pa.BaseExtensionType) or pa.types.is_union(arrow_type):
        return True
    # Run-end encoded and list-view types (newer pyarrow: looked up by name, absent before 16).
    if any(getattr(pa.types, name, _never)(arrow_type) for name in _NEWER_UNSUPPORTED):
        return True
    if pa.types.is_struct(arrow_type):
        return any(_unsupported(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    if pa.types.is_map(arrow_type):
        return _unsupported(arrow_type.key_type) or _unsupported(arrow_type.item_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return _unsupported(arrow_type.value_type)
    return False


def check_schema(schema: pa.Schema, columns: Sequence[str], *, source: str) -> None:
    """Refuse a column whose Arrow type has no decoder, naming it and its type."""
    for name in columns:
        arrow_type = schema.field(name).type
        if _unsupported(arrow_type):
            raise UnsupportedColumnError(
                f"{source}: expected columns of types this reader decodes (numbers, bools, strings, binary, "
                f"timestamps, dates, lists, structs, maps), found column {name!r} of Arrow type {arrow_type}; "
                f"leave it out with columns=[...], or cast it when writing the Parquet files"
            )


def _number_lists(column: pa.Array) -> list[Any]:
    """Each row's list of numbers as a read-only ndarray view of one flat array (None for a null row)."""
    if pa.types.is_fixed_size_list(column.type):
        width = column.type.list_size
        flat = column.flatten().to_numpy(zero_copy_only=False)  # (rows * width,)
        rows = flat.reshape(-1, width)  # (rows, width)
        values: list[Any] = list(rows)
    else:
        offsets = column.offsets.to_numpy()  # (rows + 1,): positions in the whole child array
        flat = column.values.to_numpy(zero_copy_only=False)  # the whole child array, whatever the slice
        values = [flat[start:end] for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    if column.null_count:
        mask = column.is_null().to_numpy(zero_copy_only=False)
        values = [None if missing else value for value, missing in zip(values, mask.tolist())]
    return values


@dataclass(frozen=True)
class BufferColumn:
    """A string or binary column kept as its Arrow buffers: each row is sliced (and, for text,
    decoded) when read, as an MDS ``str`` or ``bytes`` column is. A worker that reads a part of a
    shard pays for that part only."""

    offsets: list[int]  # (rows + 1,): each row's start in ``data``, then the last row's end
    data: bytes
    text: bool

    def __getitem__(self, index: int) -> str | bytes:
        cell = self.data[self.offsets[index] : self.offsets[index + 1]]
        return cell.decode("utf-8") if self.text else cell

    def __len__(self) -> int:
        return len(self.offsets) - 1


def _buffer_column(array: pa.Array) -> BufferColumn | None:
    """``array`` as a ``BufferColumn`` when it is a string or binary array without nulls."""
    arrow_type = array.type
    text = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if array.null_count or not (text or pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)):
        return None
    _, offset_buffer, data = array.buffers()
    if offset_buffer is None:  # an empty array
        return BufferColumn([0], b"", text)
    large = pa.types.is_large_string(arrow_type) or pa.types.is_large_binary(arrow_type)
    every = np.frombuffer(offset_buffer, np.int64 if large else np.int32)  # the whole buffer's offsets
    offsets = every[array.offset : array.offset + len(array) + 1]  # (rows + 1,): positions in ``data``
    return BufferColumn(offsets.tolist(), b"" if data is None else data.to_pybytes(), text)


def _numbers(array: pa.Array) -> np.ndarray:
    """An integer or float array without nulls as a read-only numpy view of its buffer (pyarrow's
    ``to_numpy`` would import pandas, most of a second, in every process)."""
    arrow_type = array.type
    letter = "f" if pa.types.is_floating(arrow_type) else "i" if pa.types.is_signed_integer(arrow_type) else "u"
    dtype = np.dtype(f"<{letter}{arrow_type.bit_width // 8}")
    every = np.frombuffer(array.buffers()[1], dtype) if len(array) else np.empty(0, dtype)
    return every[array.offset : array.offset + len(array)]  # (rows,)


def decode_column(column: pa.ChunkedArray | pa.Array, feature: str | None) -> Values | BufferColumn:
    """One column of a row group as per-row values (see the module docstring)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    arrow_type = array.type
    if pa.types.is_dictionary(arrow_type):
        array = array.dictionary_decode()
        arrow_type = array.type
    if array.null_count == 0 and (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)):
        return _numbers(array)
    if array.null_count == 0 and (
        _is_numeric(arrow_type) or pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type)
        or pa.types.is_duration(arrow_type)
    ):
        return array.to_numpy(zero_copy_only=False)  # pyarrow imports pandas for this, once per process
    if _is_number_list(arrow_type):
        return _number_lists(array)
    buffers = _buffer_column(array)
    if buffers is not None:
        return buffers
    values = array.to_pylist()
    if feature == "Image" and pa.types.is_struct(arrow_type):
        return LazyImages(values)
    return values


class LazyImages(list):
    """The Hub's ``Image`` cells (``{"bytes", "path"}``), each decoded to a PIL image when read, as our
    ``jpeg``/``png`` encodings decode; a cell without bytes (an external path) stays a dict."""

    def __getitem__(self, index: Any) -> Any:
        found = super().__getitem__(index)
        if isinstance(index, slice):
            return [_image(cell) for cell in found]
        return _image(found)

    def __iter__(self) -> Any:
        return (_image(cell) for cell in super().__iter__())


_IMAGE_DECODE: Callable[[bytes], Any] = get_encoding("jpeg").decode


def _image(cell: Any) -> Any:
    if isinstance(cell, dict) and cell.get("bytes") is not None:
        return _IMAGE_DECODE(cell["bytes"])
    return cell


@dataclass(frozen=True)
class DecodedRows:
    """A decoded run of rows: each column's per-row values."""

    columns: Mapping[str, Values | BufferColumn]
    num_rows: int


def decode_table(table: pa.Table, features: Mapping[str, str]) -> DecodedRows:
    """Every column of ``table`` decoded once (``decode_column``)."""
    columns = {name: decode_column(table.column(name), features.get(name)) for name in table.column_names}
    return DecodedRows(columns, table.num_rows)


__all__ = ["BufferColumn", "DecodedRows", "LazyImages", "UnsupportedColumnError", "check_schema", "decode_column", "decode_table", "hub_features"]
