"""Random access to the samples of one Parquet shard, from its local copy or the file itself.

The local copy holds the shard's column chunks back to back, then the file's footer. pyarrow reads it
through ``RangeFile``, which maps each read at an offset of the original file onto the copy (pyarrow
reads only inside column chunks once it has the metadata). A local-only stream reads the Parquet file
in place. The shard's row groups are read and decoded together on its first read, and kept while it
is open; ``rows.row_reader`` then makes each sample's dict.
"""

from __future__ import annotations

import io
import mmap
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stream_plugin.errors import FormatError, ShardIntegrityError
from stream_plugin.format.index import ShardEntry
from stream_plugin.parquet.arrow import pa, pq
from stream_plugin.parquet.decode import DecodedRows, check_schema, decode_table, hub_features
from stream_plugin.parquet.download import check_unchanged
from stream_plugin.parquet.entries import parquet_shard
from stream_plugin.parquet.footer import parse_footer
from stream_plugin.parquet.layout import Segments, leaves_per_column, shard_ranges
from stream_plugin.parquet.rows import RowRead, row_reader


class RangeFile(io.RawIOBase):
    """A read-only file of the original's size whose kept ranges are served from a local copy."""

    def __init__(self, view: mmap.mmap, segments: Segments, size: int, *, source: str) -> None:
        super().__init__()
        self._view = view
        self._segments = segments
        self._size = size
        self._position = 0
        self._source = source

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: Any) -> int:
        wanted = min(len(buffer), self._size - self._position)
        if wanted <= 0:
            return 0
        local = self._segments.local_offset(self._position, wanted)
        if local is None:
            raise ShardIntegrityError(
                f"{self._source}: expected reads inside the shard's cached byte ranges, found one at "
                f"[{self._position}, {self._position + wanted}); the cached copy does not match the index: "
                "delete it to download it again"
            )
        memoryview(buffer)[:wanted] = self._view[local : local + wanted]
        self._position += wanted
        return wanted


class ParquetShardReader:
    """Samples of one Parquet shard (``ShardReader``): ``read``, ``read_many``, ``read_columns``."""

    def __init__(self, entry: ShardEntry, folder: str | os.PathLike[str]) -> None:
        self.entry = entry
        self.num_samples = entry.samples
        self._shard = parquet_shard(entry)
        self._source = f"Parquet shard {entry.raw_data.basename} ({self._shard.file})"
        self._map: mmap.mmap | None = None
        self._file: pq.ParquetFile | None = self._open(Path(folder))
        arrow_schema = self._file.schema_arrow
        metadata = self._file.metadata
        self._columns = list(self._shard.read_columns)
        check_schema(arrow_schema, self._columns, source=self._source)
        self._features = hub_features(arrow_schema)
        rows = sum(metadata.row_group(group).num_rows for group in self._shard.row_groups)
        if rows != entry.samples:
            raise ShardIntegrityError(
                f"{self._source}: expected {entry.samples} rows as index.json records, found {rows} in its row "
                "groups; the file changed: index the data again"
            )
        self._decoded: DecodedRows | None = None
        self.read: RowRead = self._first_read
        """One sample (``read(index)``): each column's value in its row. The first call decodes the shard."""

    def _open(self, folder: Path) -> pq.ParquetFile:
        shard = self._shard
        if shard.direct is not None:
            found = os.stat(shard.direct).st_size
            check_unchanged(shard, found, None, where=shard.direct)
            return pq.ParquetFile(shard.direct, memory_map=True)
        path = folder / self.entry.raw_data.basename
        with open(path, "rb") as file:
            self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        footer = bytes(self._map[len(self._map) - shard.footer_bytes :])
        metadata = parse_footer(footer, source=str(path))
        leaves = leaves_per_column(metadata.schema.to_arrow_schema())
        wanted = sorted(leaf for name in shard.read_columns for leaf in leaves[name])
        segments = Segments.of(shard_ranges(metadata, shard.row_groups, wanted))
        if segments.total + shard.footer_bytes != len(self._map):
            raise ShardIntegrityError(
                f"{path}: expected {segments.total + shard.footer_bytes} bytes (the shard's chunks and footer), "
                f"found {len(self._map)}; delete it to download it again"
            )
        virtual = RangeFile(self._map, segments, shard.file_bytes, source=str(path))
        # pre_buffer=False: each column chunk is read on its own. With it (pyarrow's default), chunks of
        # several row groups are read as one span, across the chunks of the columns left out.
        return pq.ParquetFile(pa.PythonFile(virtual, mode="r"), metadata=metadata, pre_buffer=False)

    def _rows(self) -> DecodedRows:
        """The shard's rows, decoded on first use (its row groups read in one call) and kept while open."""
        if self._decoded is None:
            if self._file is None:
                raise FormatError(f"{self._source}: expected an open reader, found it closed; open the shard again")
            table = self._file.read_row_groups(list(self._shard.row_groups), columns=self._columns, use_threads=False)
            self._decoded = decode_table(table, self._features)
            values = [self._decoded.columns[name] for name in self._columns]
            self.read = row_reader(self._columns, values, self.num_samples, self._out_of_range)
        return self._decoded

    def _first_read(self, index: int) -> dict[str, Any]:
        self._rows()
        return self.read(index)

    def _out_of_range(self, index: int) -> None:
        raise IndexError(f"{self._source}: expected a sample index in [0, {self.num_samples}), found {index}")

    def read_many(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Several samples, in the order given."""
        self._rows()
        read = self.read
        return [read(index) for index in np.asarray(indices, np.int64).reshape(-1).tolist()]

    def read_columns(self, indices: Sequence[int] | np.ndarray) -> dict[str, np.ndarray | list[Any]]:
        """Several samples column by column: arrays for the numeric columns, lists for the others."""
        wanted = np.asarray(indices, np.int64).reshape(-1)  # (k,)
        if wanted.size and (int(wanted.min()) < 0 or int(wanted.max()) >= self.num_samples):
            self._out_of_range(int(wanted.max()) if int(wanted.max()) >= self.num_samples else int(wanted.min()))
        rows = self._rows().columns
        positions = wanted.tolist()
        return {
            name: values[wanted] if isinstance(values, np.ndarray) else [values[i] for i in positions]
            for name, values in ((name, rows[name]) for name in self._columns)
        }

    def _closed_read(self, index: int) -> dict[str, Any]:
        raise FormatError(f"{self._source}: expected an open reader, found it closed; open the shard again")

    def raw_sample(self, index: int) -> memoryview:
        raise FormatError(
            f"{self._source}: expected a shard with raw sample bytes (MDS), found a Parquet shard; read its "
            "samples with read() instead"
        )

    def close(self) -> None:
        self._decoded = None
        self.read = self._closed_read
        self._file = None
        if self._map is not None:
            self._map.close()
            self._map = None


__all__ = ["ParquetShardReader", "RangeFile"]
