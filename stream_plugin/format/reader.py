"""Open a shard for reading, check its files against the index, and decompress stored shards in place.

``open_shard`` maps the raw file(s) once and parses the offset table once; every later read is a slice
of that map. It expects the raw (uncompressed) files: ``materialize_shard`` produces them from the
compressed ones a dataset stores.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from stream_plugin.errors import ShardIntegrityError
from stream_plugin.fileio import publish, temporary_sibling
from stream_plugin.format.compression import decompress_file, parse_compression
from stream_plugin.format.hashing import verify_digests
from stream_plugin.format.index import FileInfo, ShardEntry
from stream_plugin.format.jsonl import JSONShardReader
from stream_plugin.format.mds import MDSShardReader
from stream_plugin.format.read_options import DEFAULT_READ_OPTIONS, ReadOptions
from stream_plugin.format.shard_file import missing_file_error
from stream_plugin.format.xsv import XSVShardReader

__all__ = ["ShardReader", "check_shard_file", "materialize_shard", "open_shard"]


class ShardReader(Protocol):
    """Random access to the samples of one shard."""

    entry: ShardEntry
    num_samples: int

    def read(self, index: int) -> dict[str, Any]: ...

    def read_many(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]: ...

    def read_columns(self, indices: Sequence[int] | np.ndarray) -> dict[str, np.ndarray | list[Any]]: ...

    def raw_sample(self, index: int) -> memoryview: ...

    def close(self) -> None: ...


def open_shard(
    entry: ShardEntry,
    folder: str | os.PathLike[str],
    *,
    allow_unsafe_types: bool = False,
    read_options: ReadOptions = DEFAULT_READ_OPTIONS,
) -> ShardReader:
    """Open the raw file(s) of ``entry`` under ``folder`` (the dataset folder that holds index.json).

    ``allow_unsafe_types`` allows ``pkl`` columns, whose decoding runs arbitrary code. ``read_options``
    (images as tensors, ``bytes`` as views) apply to MDS shards: the text formats have neither column.
    """
    if entry.format == "mds":
        return MDSShardReader(entry, folder, allow_unsafe_types=allow_unsafe_types, read_options=read_options)
    if entry.format == "json":
        return JSONShardReader(entry, folder)
    if entry.format == "parquet":
        from stream_plugin.parquet.reader import ParquetShardReader  # pyarrow, imported for Parquet only

        return ParquetShardReader(entry, folder)
    return XSVShardReader(entry, folder)


def check_shard_file(
    entry: ShardEntry, folder: str | os.PathLike[str], *, validate_hash: bool = False
) -> None:
    """Check that the raw file(s) of ``entry`` exist with the size (and, optionally, digests) of the index."""
    for raw, _ in entry.file_pairs():
        _check_file(Path(folder) / raw.basename, raw, validate_hash=validate_hash, what="raw shard file")


def materialize_shard(
    entry: ShardEntry, folder: str | os.PathLike[str], *, keep_zip: bool = True, validate_hash: bool = False
) -> None:
    """Make the raw file(s) of ``entry`` exist under ``folder``, decompressing the stored ones if needed.

    Each raw file appears by rename, complete or not at all. Calling it again is a no-op. With
    ``keep_zip=False`` the compressed file is removed once its raw file is in place.
    """
    for raw, zipped in entry.file_pairs():
        raw_path = Path(folder) / raw.basename
        if not _is_complete(raw_path, raw, validate_hash=validate_hash):
            if zipped is None:
                _check_file(raw_path, raw, validate_hash=validate_hash, what="raw shard file")
            else:
                _decompress(entry, Path(folder), raw, zipped, validate_hash=validate_hash)
        if zipped is not None and not keep_zip:
            (Path(folder) / zipped.basename).unlink(missing_ok=True)


def _is_complete(path: Path, info: FileInfo, *, validate_hash: bool) -> bool:
    try:
        _check_file(path, info, validate_hash=validate_hash, what="raw shard file")
    except (FileNotFoundError, ShardIntegrityError):
        return False
    return True


def _decompress(
    entry: ShardEntry, folder: Path, raw: FileInfo, zipped: FileInfo, *, validate_hash: bool
) -> None:
    zip_path = folder / zipped.basename
    spec = parse_compression(entry.compression)
    if spec is None:
        raise ShardIntegrityError(
            f"{zip_path}: expected the index entry of a compressed file to name its compression, found "
            "compression null; the index is corrupt, regenerate it"
        )
    _check_file(zip_path, zipped, validate_hash=validate_hash, what="compressed shard file")
    raw_path = folder / raw.basename
    temporary = temporary_sibling(raw_path)
    try:
        written = decompress_file(spec, zip_path, temporary, source=str(zip_path), expected_size=raw.bytes)
        if written != raw.bytes:
            raise ShardIntegrityError(
                f"{zip_path}: expected it to decompress to {raw.bytes} bytes as index.json records for "
                f"{raw.basename}, found {written}. The compressed file is corrupt or from another "
                "dataset; delete it and download it again"
            )
        if validate_hash and raw.hashes:
            verify_digests(raw.hashes, temporary, source=f"{raw_path} (decompressed from {zip_path.name})")
        publish(temporary, raw_path)
    finally:
        temporary.unlink(missing_ok=True)


def _check_file(path: Path, info: FileInfo, *, validate_hash: bool, what: str) -> None:
    try:
        size = path.stat().st_size
    except FileNotFoundError as error:
        raise missing_file_error(path, what=what) from error
    if size != info.bytes:
        raise ShardIntegrityError(
            f"{path}: expected {info.bytes} bytes as index.json records for this {what}, found {size}. "
            "The file is truncated, corrupt or from another dataset; delete it and download it again"
        )
    if validate_hash and info.hashes:
        verify_digests(info.hashes, path, source=str(path))
