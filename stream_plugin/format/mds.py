"""MDS shards (spec sections 3 and 4): encode samples, build shard files, read them back.

A shard is ``uint32 N``, ``N + 1`` absolute ``uint32`` offsets, the config JSON, then the samples. A
sample holds one ``uint32`` length per variable-size column, then every column's bytes in sorted-name
order. Readers map the file once and decode from the map; fixed-size numeric columns are gathered for
many samples at once with numpy, without a Python loop over samples.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from stream_plugin.errors import ConfigError, EncodingError, FormatError, UnsafeTypeError
from stream_plugin.format.encodings import ColumnEncoding, encode_value, get_encoding
from stream_plugin.format.index import ShardEntry
from stream_plugin.format.mds_read import SampleRead, compile_read, index_error, offset_view
from stream_plugin.format.read_options import DEFAULT_READ_OPTIONS, ReadOptions
from stream_plugin.format.shard_file import MappedFile, check_offsets, read_offset_table

UINT32_LIMIT = 1 << 32


@dataclass(frozen=True)
class MDSColumns:
    """The columns of an MDS dataset in stored (sorted-name) order."""

    names: tuple[str, ...]
    encoding_names: tuple[str, ...]
    encodings: tuple[ColumnEncoding, ...]
    sizes: tuple[int | None, ...]

    def config(self) -> dict[str, Any]:
        """The MDS keys of a shard entry, as MosaicML writes them."""
        return {
            "column_names": list(self.names),
            "column_encodings": list(self.encoding_names),
            "column_sizes": list(self.sizes),
        }

    @property
    def variable_count(self) -> int:
        return sum(size is None for size in self.sizes)


def columns_for_writer(columns: Mapping[str, str]) -> MDSColumns:
    """Validate the ``columns`` argument of ``MDSWriter`` (name -> encoding) and sort it by name."""
    if not isinstance(columns, Mapping) or not columns:
        raise ConfigError(
            f"MDSWriter columns: expected a non-empty dict of column name -> encoding such as "
            f"{{'text': 'str', 'label': 'int'}}, found {columns!r:.80}"
        )
    names = tuple(sorted(columns))
    encodings = []
    for name in names:
        if not isinstance(name, str):
            raise ConfigError(f"MDSWriter columns: expected str column names, found {name!r}; rename it")
        encodings.append(_lookup(columns[name], column=name, source="MDSWriter"))
    return MDSColumns(
        names=names,
        encoding_names=tuple(columns[name] for name in names),
        encodings=tuple(encodings),
        sizes=tuple(encoding.size for encoding in encodings),
    )


def columns_for_entry(entry: ShardEntry, *, source: str) -> MDSColumns:
    """Read the column layout of an MDS shard entry, checking it against the known encodings."""
    config = entry.config
    names, encoding_names, sizes = (
        config.get(key) for key in ("column_names", "column_encodings", "column_sizes")
    )
    if not (isinstance(names, list) and isinstance(encoding_names, list) and isinstance(sizes, list)) or not (
        len(names) == len(encoding_names) == len(sizes)
    ):
        raise FormatError(
            f"{source}: expected column_names, column_encodings and column_sizes lists of equal length, "
            f"found {names!r:.60}, {encoding_names!r:.60}, {sizes!r:.60}; regenerate the index"
        )
    encodings = tuple(
        _lookup(name, column=column, source=source) for column, name in zip(names, encoding_names)
    )
    for column, encoding, size in zip(names, encodings, sizes):
        if size != encoding.size and size is not None:
            raise FormatError(
                f"{source} column {column!r}: expected column_sizes entry {encoding.size} for encoding "
                f"{encoding.name!r}, found {size!r}; the index is corrupt, regenerate it"
            )
    return MDSColumns(tuple(names), tuple(encoding_names), encodings, tuple(sizes))


def _lookup(name: object, *, column: str, source: str) -> ColumnEncoding:
    try:
        return get_encoding(name)  # type: ignore[arg-type]
    except EncodingError as error:
        raise type(error)(f"{source} column {column!r}: {error}") from error


# --------------------------------------------------------------------------------------------------
# Writing.


def make_sample_encoder(columns: MDSColumns) -> Callable[[Mapping[str, Any]], bytes]:
    """Return a function that turns one sample dict into its MDS bytes (spec section 3)."""
    fields = tuple(zip(columns.names, columns.encodings))
    variable = tuple(size is None for size in columns.sizes)
    head = struct.Struct(f"<{columns.variable_count}I")
    names = columns.names

    def encode_sample(sample: Mapping[str, Any]) -> bytes:
        try:
            data = [encode_value(encoding, sample[name], column=name) for name, encoding in fields]
        except KeyError as error:
            missing = [name for name in names if name not in sample]
            raise EncodingError(
                f"MDSWriter: expected every column {list(names)} in the sample, found it lacks {missing}; "
                "add the missing keys (extra keys are ignored)"
            ) from error
        sizes = [len(datum) for datum, is_variable in zip(data, variable) if is_variable]
        return b"".join([head.pack(*sizes), *data])

    return encode_sample


def shard_overhead(config: bytes) -> int:
    """Bytes of an MDS shard that are not sample bytes or per-sample offsets: N, the last offset, config."""
    return 4 + 4 + len(config)


def build_shard(samples: Sequence[bytes], config: bytes) -> bytes:
    """The bytes of one MDS shard file holding ``samples``."""
    count = len(samples)
    header = 4 + 4 * (count + 1) + len(config)
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(np.fromiter(map(len, samples), np.int64, count), out=offsets[1:])
    offsets += header
    if offsets[-1] >= UINT32_LIMIT:
        raise ConfigError(
            f"MDS shard: expected at most {UINT32_LIMIT - 1} bytes (offsets are uint32), found "
            f"{int(offsets[-1])}; lower size_limit"
        )
    return b"".join([struct.pack("<I", count), offsets.astype("<u4").tobytes(), config, *samples])


# --------------------------------------------------------------------------------------------------
# Reading.


class MDSShardReader:
    """Random access to the samples of one raw MDS shard file through one memory map.

    ``read_options`` says what the values are: images as PIL or tensors, ``bytes`` copied or as views
    of the map (``format.read_options``)."""

    def __init__(
        self,
        entry: ShardEntry,
        folder: str | os.PathLike[str],
        *,
        allow_unsafe_types: bool = False,
        read_options: ReadOptions = DEFAULT_READ_OPTIONS,
    ) -> None:
        self.entry = entry
        self.num_samples = entry.samples
        self._source = f"MDS shard {entry.raw_data.basename}"
        stored = columns_for_entry(entry, source=self._source)
        refuse_unsafe(stored.names, stored.encodings, allow=allow_unsafe_types, source=self._source)
        self._columns = replace(stored, encodings=read_options.encodings(stored.names, stored.encodings))
        self._file = MappedFile(folder, entry.raw_data, what="MDS shard file")
        try:
            self._offsets = read_offset_table(
                self._file.view, samples=entry.samples, source=str(self._file.path)
            )
            check_offsets(self._offsets, first=None, end=len(self._file.view), source=str(self._file.path))
        except BaseException:
            self._file.close()
            raise
        self._view = self._file.view
        self._offset_view = offset_view(self._view, entry.samples)
        self._bytes = np.frombuffer(self._view, np.uint8)
        self._head_size = 4 * self._columns.variable_count
        self._head = struct.Struct(f"<{self._columns.variable_count}I")
        self._fields = tuple(
            zip(self._columns.names, (e.decode for e in self._columns.encodings), self._columns.sizes)
        )
        self.read: SampleRead = compile_read(
            self._columns.names,
            self._columns.encodings,
            self._columns.sizes,
            offsets=self._offset_view,
            view=self._view,
            raw=self._file.raw,
            num_samples=self.num_samples,
            source=self._source,
        )
        """Decode one sample (``read(index)``); ndarray columns are read-only views into the map. Written
        out for the shard's column layout (``mds_read.compile_read``): this is the per-sample hot path."""

    def _span(self, index: int) -> tuple[int, int]:
        if not 0 <= index < self.num_samples:
            raise index_error(self._source, self.num_samples, index)
        return self._offset_view[index], self._offset_view[index + 1]

    def raw_sample(self, index: int) -> memoryview:
        """The undecoded bytes of one sample (a view into the map)."""
        begin, end = self._span(int(index))
        return self._view[begin:end]

    def raw_columns(self, index: int) -> dict[str, memoryview]:
        """The undecoded bytes of each column of one sample (to copy samples without decoding them)."""
        begin, _ = self._span(int(index))
        sizes = iter(self._head.unpack_from(self._view, begin))
        position = begin + self._head_size
        columns = {}
        for name, _, size in self._fields:
            if size is None:
                size = next(sizes)
            columns[name] = self._view[position : position + size]
            position += size
        return columns

    def read_many(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Decode several samples, in the order given."""
        return [self.read(index) for index in np.asarray(indices, np.int64).reshape(-1).tolist()]

    def read_columns(self, indices: Sequence[int] | np.ndarray) -> dict[str, np.ndarray | list[Any]]:
        """Decode several samples column by column.

        Fixed-size numeric columns come back as one array of shape ``(len(indices), *shape)`` gathered
        straight from the map; other columns as lists of decoded values.
        """
        wanted = np.asarray(indices, np.int64).reshape(-1)
        if wanted.size and (wanted.min() < 0 or wanted.max() >= self.num_samples):
            raise IndexError(
                f"{self._source}: expected sample indices in [0, {self.num_samples}), found "
                f"{int(wanted.min())}..{int(wanted.max())}"
            )
        begins = self._offsets[wanted]  # (k,)
        variable_count = self._columns.variable_count
        if variable_count:
            head = self._bytes[begins[:, None] + np.arange(self._head_size)]  # (k, 4 * variable_count)
            variable_sizes = head.view("<u4").astype(np.int64)  # (k, variable_count)
        position = begins + self._head_size  # (k,)
        variable_index = 0
        columns: dict[str, np.ndarray | list[Any]] = {}
        for name, encoding, size in zip(self._columns.names, self._columns.encodings, self._columns.sizes):
            if size is None:
                sizes = variable_sizes[:, variable_index]  # (k,)
                variable_index += 1
                columns[name] = self._decode_each(encoding, position, sizes)
                position = position + sizes
                continue
            if encoding.numpy_dtype is not None:
                block = self._bytes[position[:, None] + np.arange(size)]  # (k, size) uint8
                shape = encoding.shape or ()
                columns[name] = block.view(encoding.numpy_dtype).reshape((len(wanted), *shape))
            else:
                columns[name] = self._decode_each(encoding, position, np.full(len(wanted), size))
            position = position + size
        return columns

    def _decode_each(self, encoding: ColumnEncoding, begins: np.ndarray, sizes: np.ndarray) -> list[Any]:
        view, decode = self._view, encoding.decode
        return [decode(view[begin : begin + size]) for begin, size in zip(begins.tolist(), sizes.tolist())]

    def close(self) -> None:
        """Release the map (arrays already returned keep their memory alive); ``read`` fails after."""
        self.read = _closed_read
        self._bytes = np.empty(0, np.uint8)
        if isinstance(self._offset_view, memoryview):
            self._offset_view.release()
        self._view = memoryview(b"")
        self._file.close()


def _closed_read(index: int) -> dict[str, Any]:
    raise ValueError(f"sample {index}: the MDS shard reader is closed; open the shard again")


def refuse_unsafe(
    names: Sequence[str], encodings: Sequence[ColumnEncoding], *, allow: bool, source: str
) -> None:
    """Refuse to open a shard with a column that runs code when decoded (``pkl``) unless allowed."""
    if allow:
        return
    unsafe = [name for name, encoding in zip(names, encodings) if encoding.unsafe]
    if unsafe:
        raise UnsafeTypeError(
            f"{source}: column(s) {unsafe} use an unsafe encoding (pkl) that runs arbitrary code when "
            "decoded; expected only safe encodings (the shard contains an unsafe type). If you trust this "
            "dataset, pass allow_unsafe_types=True"
        )
