"""``index_parquet``: index a folder of Parquet files by their footers alone, once.

The footers are fetched in parallel (a thread pool, each fetch with the store's retries); the data is
never read. Every file must have the first file's schema: drift is refused here, naming the first
differing file and column. The index is written as ``index.json`` beside the data, or in ``out`` (a
folder or bucket of the user's, for a source the user cannot write); then each entry records the
source's URL and a stream over ``out`` reads the shards from the source.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from stream_plugin.errors import ConfigError, FormatError
from stream_plugin.format.index import INDEX_BASENAME, index_document
from stream_plugin.parquet.arrow import pa
from stream_plugin.parquet.entries import ParquetShard, shard_entry_config
from stream_plugin.parquet.footer import Footer, read_footer
from stream_plugin.parquet.layout import column_bytes, leaves_per_column
from stream_plugin.parquet.plan import DEFAULT_SHARD_BYTES, plan_shards
from stream_plugin.storage import RetryPolicy, call_with_retries, is_remote, open_store
from stream_plugin.storage.base import RangedStore, ranged

DEFAULT_FOOTER_THREADS = 32
PARQUET_SUFFIX = ".parquet"


class SchemaDriftError(FormatError):
    """Two Parquet files of one dataset have different schemas."""


@dataclass(frozen=True)
class ParquetIndex:
    """What ``index_parquet`` wrote: where, and how many files, shards and rows it describes."""

    index_url: str
    files: int
    shards: int
    rows: int


def _source_url(store: Any, source: str) -> str:
    """The source as an index kept elsewhere records it: at its commit where the store pins one (the
    Hub's ``pinned_url``: the order never changes under the user), a local folder as an absolute path."""
    pinned = getattr(store, "pinned_url", None)
    if callable(pinned):
        return str(pinned())
    return source if is_remote(source) else os.path.abspath(os.fspath(source))


def list_parquet_files(store: Any, *, source: str) -> list[str]:
    """The keys of the ``*.parquet`` files under the store's root, sorted (the dataset's file order)."""
    keys = [key for key in store.list("") if key.endswith(PARQUET_SUFFIX)]
    if not keys:
        raise ConfigError(
            f"source: expected a folder holding *.parquet files, found none in {source!r}; point at the folder "
            "of the dataset's Parquet files (for the Hub, hf://datasets/ORG/NAME@refs%2Fconvert%2Fparquet/...)"
        )
    return keys


def fetch_footers(
    store: RangedStore, keys: Sequence[str], *, policy: RetryPolicy, threads: int = DEFAULT_FOOTER_THREADS
) -> list[Footer]:
    """Each file's footer, fetched in parallel, each with ``policy``'s retries; in the order of ``keys``."""

    def fetch(key: str) -> Footer:
        return call_with_retries(
            lambda: read_footer(store, key, timeout=policy.timeout), policy, describe=f"footer of {key!r}"
        )

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(keys)))) as pool:
        return list(pool.map(fetch, keys))


def check_schemas(schemas: Sequence[pa.Schema], keys: Sequence[str]) -> None:
    """Refuse a file whose schema differs from the first file's: name the file and the first column."""
    first = schemas[0].remove_metadata()
    for key, schema in zip(keys[1:], schemas[1:]):
        found = schema.remove_metadata()
        if found.equals(first):
            continue
        column = next(
            (
                name
                for name in dict.fromkeys([*first.names, *found.names])
                if name not in first.names
                or name not in found.names
                or not first.field(name).type.equals(found.field(name).type)
            ),
            first.names[0] if first.names else "?",
        )
        expected = first.field(column).type if column in first.names else "no such column"
        actual = found.field(column).type if column in found.names else "no such column"
        raise SchemaDriftError(
            f"{key}: expected the schema of {keys[0]}, found column {column!r} as {actual} (in {keys[0]}: "
            f"{expected}); a dataset's files must share one schema: rewrite the file, or index the two groups "
            "of files as two streams"
        )


def _row_group_bytes(footer: Footer) -> list[int]:
    metadata = footer.metadata
    return [
        sum(metadata.row_group(g).column(c).total_compressed_size for c in range(metadata.num_columns))
        for g in range(metadata.num_row_groups)
    ]


def build_entries(
    footers: Sequence[Footer], *, source: str | None, shard_bytes: int = DEFAULT_SHARD_BYTES
) -> list[dict[str, Any]]:
    """The index entries of the files whose ``footers`` are given (the pure part of indexing)."""
    metadatas = [footer.metadata for footer in footers]
    schemas = [metadata.schema.to_arrow_schema() for metadata in metadatas]
    check_schemas(schemas, [footer.key for footer in footers])
    leaves = leaves_per_column(schemas[0])
    plan = plan_shards([_row_group_bytes(footer) for footer in footers], shard_bytes)
    entries = []
    for number, (file, first, stop) in enumerate(plan):
        footer, metadata = footers[file], metadatas[file]
        groups = range(first, stop)
        shard = ParquetShard(
            source=source,
            file=footer.key,
            file_bytes=footer.info.size,
            identity=footer.info.identity,
            row_groups=groups,
            footer_bytes=len(footer.data),
            column_bytes=column_bytes(metadata, groups, leaves),
        )
        rows = sum(metadata.row_group(group).num_rows for group in groups)
        entries.append(shard_entry_config(f"shard.{number:05d}.parquet", rows, shard))
    return entries


def index_parquet(
    source: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    storage_options: Mapping[str, Any] | None = None,
    out_storage_options: Mapping[str, Any] | None = None,
    threads: int = DEFAULT_FOOTER_THREADS,
    policy: RetryPolicy | None = None,
) -> ParquetIndex:
    """Index the ``*.parquet`` files under ``source`` (a folder or URL) from their footers alone.

    Writes ``index.json`` beside the data, or in ``out`` when given (then ``StreamingDataset(remote=out)``
    reads the shards from ``source``). A shard is a run of whole row groups of one file, up to
    ``shard_bytes`` compressed bytes (a larger row group is a shard of its own).
    """
    if not isinstance(shard_bytes, int) or isinstance(shard_bytes, bool) or shard_bytes <= 0:
        raise ConfigError(
            f"shard_bytes: expected a positive number of bytes per shard, found {shard_bytes!r}; pass e.g. "
            f"{DEFAULT_SHARD_BYTES} (64 MiB)"
        )
    source_text = os.fspath(source)
    store = open_store(source_text, **dict(storage_options or {}))
    data = ranged(store, source_text)
    keys = list_parquet_files(store, source=source_text)
    footers = fetch_footers(data, keys, policy=policy or RetryPolicy(), threads=threads)
    recorded = None if out is None else _source_url(store, source_text)
    entries = build_entries(footers, source=recorded, shard_bytes=shard_bytes)
    target_url = source_text if out is None else os.fspath(out)
    target = store if out is None else open_store(target_url, **dict(out_storage_options or {}))
    if out is not None and not is_remote(target_url):
        os.makedirs(target_url, exist_ok=True)
    text = json.dumps(index_document(entries), sort_keys=True).encode("utf-8")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, INDEX_BASENAME)
        with open(path, "wb") as file:
            file.write(text)
        target.upload(path, INDEX_BASENAME)
    return ParquetIndex(
        index_url=f"{target_url.rstrip('/')}/{INDEX_BASENAME}",
        files=len(keys),
        shards=len(entries),
        rows=sum(int(entry["samples"]) for entry in entries),
    )


__all__ = [
    "DEFAULT_FOOTER_THREADS",
    "ParquetIndex",
    "SchemaDriftError",
    "build_entries",
    "check_schemas",
    "fetch_footers",
    "index_parquet",
    "list_parquet_files",
]
