"""Open a dataset's streams: fetch each ``index.json`` once and describe each stream's cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from stream_plugin.cache import CacheConfig, CacheStats, cache_limit_floor
from stream_plugin.cache.future import EvictionPolicy
from stream_plugin.cache.index_store import OpenedIndex
from stream_plugin.errors import ConfigError, EmptyStreamError
from stream_plugin.format.index import INDEX_BASENAME, ShardEntry
from stream_plugin.format.index_columns import ConcatenatedEntries
from stream_plugin.format.mds import columns_for_entry, refuse_unsafe
from stream_plugin.parquet.entries import ReadView
from stream_plugin.parquet.streams import parquet_view
from stream_plugin.reading.shard_access import StreamCacheSpec
from stream_plugin.reading.stream import DownloadSettings, Stream
from stream_plugin.storage import ObjectStore
from stream_plugin.units import parse_bytes


@dataclass(frozen=True)
class OpenedStreams:
    cache_specs: list[StreamCacheSpec]
    entries: Sequence[ShardEntry]  # every stream's shards, concatenated in stream order, built on demand
    samples_per_shard_per_stream: list[np.ndarray]  # int64 (num_shards of the stream,) each
    index_digests: list[str]  # sha256 of each index.json (and its remote identity): the data part of the fingerprint
    entries_per_stream: list[Sequence[ShardEntry]]
    stored_bytes_per_stream: list[int]  # what a fully cached stream occupies locally
    stored_bytes_per_shard_per_stream: list[np.ndarray]  # int64 (num_shards of the stream,) each
    representatives: list[ShardEntry]  # the first shard of each (format, column encodings) of each stream


def _pairs(stream: Stream) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(stream.storage_options.items()))


def _limit_shares(
    cache_limit: int | None, streams: Sequence[Stream], sizes: Sequence[int]
) -> list[int | None]:
    """Split ``cache_limit`` over the remote streams in proportion to their size.

    Local-only streams are never cached or evicted, so they take no share.
    """
    if cache_limit is None:
        return [None] * len(streams)
    cached = [size if stream.remote_dir is not None else 0 for stream, size in zip(streams, sizes)]
    total = sum(cached) or 1
    return [max(1, cache_limit * size // total) if size else None for size in cached]


def open_streams(
    streams: Sequence[Stream],
    defaults: DownloadSettings,
    *,
    cache_limit: int | None,
    eviction: EvictionPolicy = "belady",
) -> tuple[list[ObjectStore | None], OpenedStreams]:
    """Fetch every stream's index (remote ones into their local folder) and validate it.

    Also returns the stores it opened, for this process to reuse (a new S3 client costs tens of ms).
    """
    configs: list[CacheConfig] = []
    indexes: list[OpenedIndex] = []
    stores: list[ObjectStore | None] = []
    views: list[ReadView | None] = []  # each Parquet stream's view of its shards (None: not Parquet)
    locals_seen: dict[str, int] = {}
    for number, stream in enumerate(streams):
        settings = stream.download_settings(defaults)
        local = str(Path(stream.local_dir).resolve())
        if local in locals_seen:
            raise ConfigError(
                f"streams {locals_seen[local]} and {number}: expected a separate local folder per stream, found "
                f"both using {local!r}; give each stream its own local folder (or split)"
            )
        locals_seen[local] = number
        config = CacheConfig(
            local=stream.local_dir,
            remote=stream.remote_dir,
            keep_zip=settings.keep_zip,
            validate_hash=settings.validate_hash,
            download_retry=settings.download_retry,
            download_timeout=settings.download_timeout,
            eviction=eviction,
            throttle_deadline=stream.throttle_deadline,
        )
        spec = StreamCacheSpec(config=config, remote=stream.remote_dir, store_options=_pairs(stream))
        store = spec.open_store()
        index = spec.open(CacheStats(), store).opened_index()
        parquet = parquet_view(
            index,
            columns=stream.columns,
            local_only=stream.local_dir if stream.remote_dir is None else None,
            source=str(Path(stream.local_dir) / INDEX_BASENAME),
        )
        if parquet is not None:
            index, view = parquet
            spec = replace(spec, parquet=view)
            store = spec.for_stream(store)
        views.append(None if parquet is None else parquet[1])
        stores.append(store)
        if not index.columns.samples.any():
            raise EmptyStreamError(
                f"{Path(stream.local_dir) / INDEX_BASENAME}: expected a stream with at least one sample, found "
                f"{index.columns.num_shards} shard(s) holding none (Stream contains no samples: "
                f"{Path(stream.local_dir) / INDEX_BASENAME}); point the stream at a dataset a writer "
                "finished writing, or leave it out"
            )
        indexes.append(index)
        configs.append(config)
    sizes = [int(index.columns.stored_bytes.sum()) for index in indexes]
    shares = _limit_shares(cache_limit, streams, sizes)
    specs = [
        StreamCacheSpec(
            config=replace(config, cache_limit=share),
            remote=stream.remote_dir,
            store_options=_pairs(stream),
            parquet=view,
        )
        for config, share, stream, view in zip(configs, shares, streams, views)
    ]
    return stores, OpenedStreams(
        cache_specs=specs,
        entries=ConcatenatedEntries([index.entries for index in indexes]),
        samples_per_shard_per_stream=[index.columns.samples for index in indexes],
        index_digests=[index.digest for index in indexes],
        entries_per_stream=[index.entries for index in indexes],
        stored_bytes_per_stream=sizes,
        stored_bytes_per_shard_per_stream=[index.columns.stored_bytes for index in indexes],
        representatives=[
            index.entries[shard] for index in indexes for shard in index.columns.first_of_kind.tolist()
        ],
    )


def refuse_unsafe_columns(entries: Sequence[ShardEntry], *, allow_unsafe_types: bool) -> None:
    """Refuse, when the dataset is built, columns whose decoding runs code (``pkl``) unless allowed."""
    if allow_unsafe_types:
        return
    checked: set[tuple[str, ...]] = set()
    for entry in entries:
        if entry.format != "mds":
            continue
        key = tuple(map(str, entry.config.get("column_encodings") or ()))
        if key in checked:
            continue
        checked.add(key)
        source = f"MDS shard {entry.raw_data.basename}"
        columns = columns_for_entry(entry, source=source)
        refuse_unsafe(columns.names, columns.encodings, allow=False, source=source)


def check_cache_limit(
    opened: OpenedStreams, cache_limit: int | None, *, readers: int, shards_per_reader: int
) -> None:
    """Refuse at start-up a ``cache_limit`` too small for ``readers`` on this node; name the smallest."""
    cached = [
        (footprints, size)
        for spec, footprints, size in zip(
            opened.cache_specs, opened.stored_bytes_per_shard_per_stream, opened.stored_bytes_per_stream
        )
        if spec.remote is not None
    ]
    check_node_cache_limit(cache_limit, cached, readers=readers, shards_per_reader=shards_per_reader)


def check_node_cache_limit(
    cache_limit: int | None,
    streams: Sequence[tuple[np.ndarray, int]],
    *,
    readers: int,
    shards_per_reader: int,
) -> None:
    """``check_cache_limit``'s rule, from each cached stream's shard bytes and total bytes (the limit is
    split over the streams by size): every stream's share holds ``readers`` x ``shards_per_reader`` of
    its largest shards. ``stream-plugin simulate`` applies it too."""
    if cache_limit is None:
        return
    smallest = node_cache_limit_floor(streams, readers=readers, shards_per_reader=shards_per_reader)
    if cache_limit < smallest:
        raise ConfigError(
            f"cache_limit: expected at least {smallest} bytes for {readers} readers on this node (ranks x "
            f"DataLoader workers), each holding {shards_per_reader} shards, found {cache_limit} (in MosaicML's words: "
            f"Minimum cache usage ({smallest} bytes) is larger than the cache limit ({cache_limit} bytes); Cache "
            f"limit ({cache_limit} bytes) is too low. Increase the `cache_limit` to {smallest}); raise cache_limit "
            f"to {smallest} or more, use fewer workers, or pass cache_limit=None to keep every shard"
        )


def node_cache_limit_floor(
    streams: Sequence[tuple[np.ndarray, int]], *, readers: int, shards_per_reader: int
) -> int:
    """The smallest node ``cache_limit`` ``check_node_cache_limit`` accepts."""
    total = sum(size for _, size in streams)
    smallest = 0
    for footprints, size in streams:
        if not len(footprints):
            continue
        stream_minimum = cache_limit_floor(footprints.tolist(), readers, shards_per_reader)
        # The stream gets limit * size / total, so the whole limit must be at least this:
        smallest = max(smallest, -(-stream_minimum * total // size))
    return smallest


def readers_within_limit(
    opened: OpenedStreams, *, readers: int, in_flight: int, floor: int, ceiling: int
) -> int:
    """How many shards each of ``readers`` processes on this node may keep open (an open shard is
    pinned against eviction) while each also downloads ``in_flight`` more, within every stream's share
    of the cache limit; between ``floor`` and ``ceiling``. Streams without a share (no limit, or no
    remote: never evicted) set no bound."""
    shares = [
        (parse_bytes(spec.config.cache_limit, name="cache_limit"), int(footprints.max()))
        for spec, footprints in zip(opened.cache_specs, opened.stored_bytes_per_shard_per_stream)
        if spec.config.cache_limit is not None and len(footprints)
    ]
    return readers_within(shares, readers=readers, in_flight=in_flight, floor=floor, ceiling=ceiling)


def readers_within(
    shares: Sequence[tuple[int, int]], *, readers: int, in_flight: int, floor: int, ceiling: int
) -> int:
    """``readers_within_limit`` from each limited stream's ``(share of the cache limit, largest shard
    bytes)``: the rule itself, which ``stream-plugin simulate`` also applies."""
    allowed = ceiling
    for share, largest in shares:
        allowed = min(allowed, share // (readers * (largest or 1)) - in_flight)
    return max(floor, allowed)


__all__ = [
    "OpenedStreams",
    "check_cache_limit",
    "check_node_cache_limit",
    "node_cache_limit_floor",
    "open_streams",
    "readers_within",
    "readers_within_limit",
    "refuse_unsafe_columns",
]
