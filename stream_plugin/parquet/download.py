"""The store a Parquet stream's cache is given: a shard's download fetches its byte ranges.

The cache downloads a shard by its index basename and verifies the local file's size, as for any
shard. ``ParquetShardStore`` answers that download by reading, from the data source, the file's
footer and the column chunks of the shard's row groups (and columns), written back to back and
followed by the footer. Everything else (``index.json``, its identity) passes to the index's store.
Before it reads, the file's size and identity are compared with the index: a changed file is refused.
The footers of the files read last are kept (``FooterCache``): a file's later shards do not fetch it
again. Column chunks a small gap apart are read in one request (``request_count``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from stream_plugin.errors import RemoteChangedError, StorageError
from stream_plugin.format.index import INDEX_BASENAME, ShardEntry, parse_index
from stream_plugin.parquet.entries import ParquetShard, ReadView, parquet_shard
from stream_plugin.parquet.footer_cache import FooterCache, FooterKey
from stream_plugin.storage.base import (
    ObjectStore,
    RangedStore,
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    TransientStorageError,
    range_and_info_reader,
    ranged,
)


def check_unchanged(shard: ParquetShard, size: int, identity: str | None, *, where: str) -> None:
    """Refuse a file whose size or identity differs from what the index recorded."""
    if size != shard.file_bytes or (shard.identity is not None and identity is not None and identity != shard.identity):
        raise RemoteChangedError(
            f"{where}: expected the Parquet file the index describes ({shard.file_bytes} bytes, identity "
            f"{shard.identity}), found it changed ({size} bytes, identity {identity}); its row groups may "
            "differ from the index: index the data again (stream-plugin index-parquet) and read the new index "
            "with a fresh local folder"
        )


def write_shard(
    data: RangedStore,
    shard: ParquetShard,
    dest: str | os.PathLike[str],
    *,
    timeout: float | None = None,
    footers: FooterCache | None = None,
    source: str = "",
) -> int:
    """Write the shard's local copy to ``dest`` (its chunks, then the footer); return its size.

    The requests are ``request_count``'s: the file's size and identity checked against the index (a
    HEAD, or the first GET's answer where the store gives them there: ``range_and_info_reader``), the
    footer unless ``footers`` holds it (kept under ``source``, the data's URL, for the next shard of the
    file), and the column chunks, coalesced into few reads whose gap bytes are dropped.
    """
    # pyarrow on first download: every stream imports this module, few read Parquet.
    from stream_plugin.parquet.footer import MAGIC, ParquetFormatError, parse_footer
    from stream_plugin.parquet.layout import coalesce, leaves_per_column, shard_ranges
    from stream_plugin.parquet.request_count import HOLE_BYTES, READ_LIMIT_BYTES

    read_and_check = range_and_info_reader(data)
    checked = read_and_check is None
    if read_and_check is None:
        info = data.object_info(shard.file, timeout=timeout)
        check_unchanged(shard, info.size, info.identity, where=shard.file)
        footers = footers if info.identity is not None else None

    def read(start: int, end: int) -> bytes:
        """Bytes of the file; the first read also checks the file, where the store answers both at once."""
        nonlocal checked
        if checked:
            return data.read_range(shard.file, start, end, timeout=timeout)
        assert read_and_check is not None
        try:
            found, info = read_and_check(shard.file, start, end, timeout=timeout)
        except (TransientStorageError, RemoteNotFoundError, RemoteAccessDeniedError):
            raise
        except StorageError:  # a range the file may no longer hold (HTTP 416): a changed file is refused as such
            info = data.object_info(shard.file, timeout=timeout)
            check_unchanged(shard, info.size, info.identity, where=shard.file)
            raise
        check_unchanged(shard, info.size, info.identity, where=shard.file)
        checked = True
        return found

    def read_footer() -> bytes:
        footer = read(shard.file_bytes - shard.footer_bytes, shard.file_bytes)
        if not footer.endswith(MAGIC):
            raise ParquetFormatError(
                f"{shard.file}: expected a footer ending with b'PAR1' at the offset the index records, found "
                f"{footer[-4:]!r}; the file changed: index the data again"
            )
        return footer

    # Kept under the index's size and identity, which the file was (or will be, before anything is
    # written) found to have; an index without an identity could not tell a file rewritten at its size.
    if footers is None or shard.identity is None:
        footer = read_footer()
    else:
        footer = footers.fetch(FooterKey(source, shard.file, shard.file_bytes, shard.identity), read_footer)
    metadata = parse_footer(footer, source=shard.file)
    leaves = leaves_per_column(metadata.schema.to_arrow_schema())
    wanted = [leaf for name in shard.read_columns for leaf in leaves[name]]
    ranges = shard_ranges(metadata, shard.row_groups, sorted(wanted))
    written = 0
    with open(dest, "wb") as file:
        kept = iter(ranges)
        for read_start, read_end in coalesce(ranges, HOLE_BYTES, READ_LIMIT_BYTES):
            view = memoryview(read(read_start, read_end))
            end = read_start
            while end < read_end:  # the ranges this read covers, back to back; the gaps between them dropped
                start, end = next(kept)
                written += file.write(view[start - read_start : end - read_start])
        if not checked:  # a kept footer and no column chunk to read: check the file on its own
            info = data.object_info(shard.file, timeout=timeout)
            check_unchanged(shard, info.size, info.identity, where=shard.file)
        written += file.write(footer)
    return written


def fetch_shard(entry: ShardEntry, index_folder: str, folder: Path) -> Path:
    """Write the local copy of a Parquet shard under ``folder`` (``stream-plugin verify``); the data is
    at ``index_folder`` (where its index lives) unless the entry names another source."""
    from stream_plugin.storage import open_store

    shard = parquet_shard(entry)
    url = shard.source or index_folder
    path = folder / entry.raw_data.basename
    path.parent.mkdir(parents=True, exist_ok=True)
    write_shard(ranged(open_store(url), url), shard, path)
    return path


class ParquetShardStore:
    """The index's store, whose ``download`` of a Parquet shard fetches its byte ranges from the data.

    ``open_data(url)`` opens the data source named by an entry (None: the index's own store).
    """

    def __init__(
        self,
        index_store: ObjectStore,
        local: str | os.PathLike[str],
        view: ReadView,
        open_data: Callable[[str], ObjectStore],
    ) -> None:
        self.url = index_store.url
        self._index_store = index_store
        self._local = Path(local)
        self._view = view
        self._open_data = open_data
        self._shards: dict[str, ShardEntry] | None = None
        self._data: dict[str | None, RangedStore] = {}
        self._footers = FooterCache()
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"ParquetShardStore({self._index_store!r})"

    def _entry(self, key: str) -> ShardEntry | None:
        with self._mutex:
            if self._shards is None:
                path = self._local / INDEX_BASENAME
                entries = parse_index(path.read_bytes(), source=str(path)) if path.is_file() else []
                viewed = (self._view.entry(entry) for entry in entries)
                self._shards = {entry.raw_data.basename: entry for entry in viewed if entry.format == "parquet"}
            return self._shards.get(key)

    def _data_store(self, source: str | None) -> RangedStore:
        with self._mutex:
            found = self._data.get(source)
            if found is None:
                store = self._index_store if source is None else self._open_data(source)
                found = self._data[source] = ranged(store, source or self.url)
            return found

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        entry = self._entry(key)
        if entry is None:
            return self._index_store.download(key, dest, timeout=timeout)
        shard = parquet_shard(entry)
        store = self._data_store(shard.source)
        return write_shard(store, shard, dest, timeout=timeout, footers=self._footers, source=shard.source or self.url)

    def upload(self, src: str | os.PathLike[str], key: str) -> None:
        self._index_store.upload(src, key)

    def read_bytes(self, key: str, *, timeout: float | None = None) -> bytes:
        return self._index_store.read_bytes(key, timeout=timeout)

    def exists(self, key: str) -> bool:
        return self._index_store.exists(key)

    def list(self, prefix: str = "") -> list[str]:
        return self._index_store.list(prefix)

    def identity(self, key: str, *, timeout: float | None = None) -> str | None:
        identity = getattr(self._index_store, "identity", None)
        return None if identity is None else identity(key, timeout=timeout)


__all__ = ["ParquetShardStore", "check_unchanged", "fetch_shard", "write_shard"]
