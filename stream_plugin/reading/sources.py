"""Open a dataset's streams: fetch each ``index.json`` once and describe each stream's cache."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stream_plugin.cache import CacheConfig, CacheStats, minimum_cache_limit
from stream_plugin.errors import ConfigError, EmptyStreamError
from stream_plugin.format.index import ShardEntry, load_index
from stream_plugin.format.mds import columns_for_entry, refuse_unsafe
from stream_plugin.reading.shard_access import StreamCacheSpec
from stream_plugin.reading.stream import DownloadSettings, Stream
from stream_plugin.storage import ObjectStore
from stream_plugin.units import parse_bytes


@dataclass(frozen=True)
class OpenedStreams:
    cache_specs: list[StreamCacheSpec]
    entries: list[ShardEntry]  # every stream's shards, concatenated in stream order
    samples_per_shard_per_stream: list[list[int]]
    index_digests: list[str]  # sha256 of each index.json (and its remote identity): the data part of the fingerprint
    entries_per_stream: list[list[ShardEntry]]
    stored_bytes_per_stream: list[int]  # what a fully cached stream occupies locally


def _pairs(stream: Stream) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(stream.storage_options.items()))


def _index_digest(index: bytes, identity: str | None) -> str:
    """What identifies a stream's data: its index bytes and, for a remote, the identity of the write
    they came from, so that a state saved on a rewritten remote is refused even when the bytes match."""
    digest = hashlib.sha256(index)
    if identity is not None:
        digest.update(b"\0" + identity.encode("utf-8"))
    return digest.hexdigest()


def _stored_bytes(entries: Sequence[ShardEntry]) -> int:
    # While a shard is decompressed both files exist; afterwards only the raw one (unless keep_zip).
    return sum(
        raw.bytes + (zipped.bytes if zipped else 0) for entry in entries for raw, zipped in entry.file_pairs()
    )


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
    streams: Sequence[Stream], defaults: DownloadSettings, *, cache_limit: int | None
) -> tuple[list[ObjectStore | None], OpenedStreams]:
    """Fetch every stream's index (remote ones into their local folder) and validate it.

    Also returns the stores it opened, for this process to reuse (a new S3 client costs tens of ms).
    """
    configs: list[CacheConfig] = []
    entries_per_stream: list[list[ShardEntry]] = []
    digests: list[str] = []
    stores: list[ObjectStore | None] = []
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
        )
        spec = StreamCacheSpec(config=config, remote=stream.remote_dir, store_options=_pairs(stream))
        store = spec.open_store()
        stores.append(store)
        cache = spec.open(CacheStats(), store)
        index_path = cache.fetch_index()
        entries = load_index(index_path)
        if not any(entry.samples for entry in entries):
            raise EmptyStreamError(
                f"{index_path}: expected a stream with at least one sample, found {len(entries)} shard(s) "
                "holding none; point the stream at a dataset a writer finished writing, or leave it out"
            )
        entries_per_stream.append(entries)
        configs.append(config)
        digests.append(_index_digest(Path(index_path).read_bytes(), cache.index_identity()))
    sizes = [_stored_bytes(entries) for entries in entries_per_stream]
    shares = _limit_shares(cache_limit, streams, sizes)
    specs = [
        StreamCacheSpec(
            config=replace(config, cache_limit=share), remote=stream.remote_dir, store_options=_pairs(stream)
        )
        for config, share, stream in zip(configs, shares, streams)
    ]
    return stores, OpenedStreams(
        cache_specs=specs,
        entries=[entry for entries in entries_per_stream for entry in entries],
        samples_per_shard_per_stream=[[entry.samples for entry in entries] for entries in entries_per_stream],
        index_digests=digests,
        entries_per_stream=entries_per_stream,
        stored_bytes_per_stream=sizes,
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
    if cache_limit is None:
        return
    cached_total = sum(
        size
        for spec, size in zip(opened.cache_specs, opened.stored_bytes_per_stream)
        if spec.remote is not None
    )
    smallest = 0
    for spec, entries, size in zip(
        opened.cache_specs, opened.entries_per_stream, opened.stored_bytes_per_stream
    ):
        if spec.remote is None or not entries:
            continue
        footprints = [_stored_bytes([entry]) for entry in entries]
        stream_minimum = minimum_cache_limit(footprints, readers, shards_per_reader)
        # The stream gets limit * size / total, so the whole limit must be at least this:
        smallest = max(smallest, -(-stream_minimum * cached_total // size))
    if cache_limit < smallest:
        raise ConfigError(
            f"cache_limit: expected at least {smallest} bytes for {readers} readers on this node (ranks x "
            f"DataLoader workers), each holding {shards_per_reader} shards, found {cache_limit}; raise cache_limit "
            f"to {smallest} or more, use fewer workers, or pass cache_limit=None to keep every shard"
        )


def readers_within_limit(
    opened: OpenedStreams, *, readers: int, in_flight: int, floor: int, ceiling: int
) -> int:
    """How many shards each of ``readers`` processes on this node may keep open (an open shard is
    pinned against eviction) while each also downloads ``in_flight`` more, within every stream's share
    of the cache limit; between ``floor`` and ``ceiling``. Streams without a share (no limit, or no
    remote: never evicted) set no bound."""
    allowed = ceiling
    for spec, entries in zip(opened.cache_specs, opened.entries_per_stream):
        if spec.config.cache_limit is None or not entries:
            continue
        share = parse_bytes(spec.config.cache_limit, name="cache_limit")
        largest = max(_stored_bytes([entry]) for entry in entries) or 1
        allowed = min(allowed, share // (readers * largest) - in_flight)
    return max(floor, allowed)


__all__ = [
    "OpenedStreams",
    "check_cache_limit",
    "open_streams",
    "readers_within_limit",
    "refuse_unsafe_columns",
]
