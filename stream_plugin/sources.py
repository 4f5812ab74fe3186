"""Open a dataset's streams: fetch each ``index.json`` once and describe each stream's cache."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stream_plugin.cache import CacheConfig, CacheStats, ShardCache
from stream_plugin.errors import ConfigError
from stream_plugin.format.index import ShardEntry, load_index
from stream_plugin.shard_access import StreamCacheSpec
from stream_plugin.stream import DownloadSettings, Stream


@dataclass(frozen=True)
class OpenedStreams:
    cache_specs: list[StreamCacheSpec]
    entries: list[ShardEntry]  # every stream's shards, concatenated in stream order
    samples_per_shard_per_stream: list[list[int]]
    index_digests: list[str]  # sha256 of each index.json: the data part of the resume fingerprint


def open_streams(
    streams: Sequence[Stream], defaults: DownloadSettings, *, cache_limit: int | None
) -> OpenedStreams:
    """Fetch every stream's index (remote ones into their local folder) and validate it."""
    specs: list[StreamCacheSpec] = []
    entries: list[ShardEntry] = []
    counts: list[list[int]] = []
    digests: list[str] = []
    locals_seen: dict[str, int] = {}
    for number, stream in enumerate(streams):
        settings = stream.download_settings(defaults)
        local = str(Path(stream.local).resolve())
        if local in locals_seen:
            raise ConfigError(
                f"streams {locals_seen[local]} and {number}: expected a separate local folder per stream, found "
                f"both using {local!r}; give each stream its own local folder (or split)"
            )
        locals_seen[local] = number
        spec = StreamCacheSpec(
            config=CacheConfig(
                local=stream.local,
                remote=stream.remote,
                cache_limit=cache_limit,
                keep_zip=settings.keep_zip,
                validate_hash=settings.validate_hash,
                download_retry=settings.download_retry,
                download_timeout=settings.download_timeout,
            ),
            remote=stream.remote,
        )
        index_path = spec.open(CacheStats()).fetch_index()
        stream_entries = load_index(index_path)
        specs.append(spec)
        entries.extend(stream_entries)
        counts.append([entry.samples for entry in stream_entries])
        digests.append(hashlib.sha256(Path(index_path).read_bytes()).hexdigest())
    return OpenedStreams(specs, entries, counts, digests)


__all__ = ["OpenedStreams", "ShardCache", "open_streams"]
