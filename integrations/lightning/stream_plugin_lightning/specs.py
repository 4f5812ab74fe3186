"""Typed, YAML-friendly descriptions of a split's data: what ``StreamingDataModule`` builds datasets from.

``StreamSpec`` and ``DatasetSpec`` mirror the arguments of ``Stream`` and ``StreamingDataset`` (names,
meanings and defaults), as plain dataclasses so that LightningCLI / jsonargparse can type-check a YAML
file against them. The per-device ``batch_size`` is not here: the DataModule owns batch sizes, because
they depend on the world size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from stream_plugin import Stream
from stream_plugin.cache.future import EvictionPolicy
from stream_plugin.errors import ConfigError
from stream_plugin.reading.config import DEFAULTS as _DEFAULTS
from stream_plugin.reading.config import BatchingMethod, SamplingMethod, ShuffleAlgo
from stream_plugin.reading.stream import DOWNLOAD_DEFAULTS as _DOWNLOADS
from stream_plugin.reading.stream_registry import DEFAULT_STREAM_NAME

# The dataset's defaults and the choices of its named options come from the core's one source
# (``DatasetConfig`` and ``DownloadSettings``, and ``Literal``s of the ``order`` registries), so that a YAML
# typo is rejected by the parser with the list of choices.


@dataclass
class StreamSpec:
    """One data source: the arguments of ``stream_plugin.Stream``.

    ``remote`` is where the shards live (``s3://...``, ``file:///...`` or a path); ``local`` is this
    node's cache folder. ``proportion``, ``repeat`` and ``choose`` weight the stream in a mix.
    ``storage_options`` go to the remote's store (an endpoint, credentials, a requester-pays project).
    """

    remote: str | None = None
    local: str | None = None
    split: str | None = None
    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None
    download_retry: int | None = None
    download_timeout: float | None = None
    validate_hash: str | None = None
    keep_zip: bool | None = None
    throttle_deadline: float | None = None
    storage_options: dict[str, Any] | None = None
    columns: list[str] | None = None  # a Parquet stream's columns to read (docs/parquet.md)

    def build(self) -> Stream:
        return Stream(**{item.name: getattr(self, item.name) for item in fields(self)})


@dataclass
class DatasetSpec:
    """One split's dataset: the arguments of ``stream_plugin.StreamingDataset`` except ``batch_size``,
    ``world`` and the data-parallel layout (the data module fills them in at setup, the layout from the
    strategy's device mesh).

    Give either ``streams`` (a mix) or ``remote`` / ``local`` (a single source).
    """

    streams: list[StreamSpec] | None = None
    remote: str | None = None
    local: str | None = None
    split: str | None = None
    download_retry: int = _DOWNLOADS.download_retry
    download_timeout: float = _DOWNLOADS.download_timeout
    validate_hash: str | None = _DOWNLOADS.validate_hash
    keep_zip: bool = _DOWNLOADS.keep_zip
    throttle_deadline: float | None = None
    columns: list[str] | None = None  # a Parquet stream's columns to read (docs/parquet.md)
    epoch_size: int | str | None = _DEFAULTS.epoch_size
    predownload: int | None = _DEFAULTS.predownload
    cache_limit: int | str | None = _DEFAULTS.cache_limit
    eviction: EvictionPolicy = _DEFAULTS.eviction
    sampling_method: SamplingMethod = _DEFAULTS.sampling_method
    sampling_granularity: int = _DEFAULTS.sampling_granularity
    partition_algo: str = _DEFAULTS.partition_algo
    num_canonical_nodes: int | None = _DEFAULTS.num_canonical_nodes
    shuffle: bool = _DEFAULTS.shuffle
    shuffle_algo: ShuffleAlgo = _DEFAULTS.shuffle_algo
    shuffle_seed: int = _DEFAULTS.shuffle_seed
    shuffle_block_size: int | None = _DEFAULTS.shuffle_block_size
    batching_method: BatchingMethod = _DEFAULTS.batching_method
    allow_unsafe_types: bool = _DEFAULTS.allow_unsafe_types
    decode: str | dict[str, str] = "pil"  # _DEFAULTS.decode, typed as YAML gives it
    zero_copy: bool | list[str] = False  # _DEFAULTS.zero_copy; or the bytes columns to view
    replication: int | None = _DEFAULTS.replication
    start_stagger: float = _DEFAULTS.start_stagger  # seconds: spread the nodes' first shard downloads
    first_shards: int | None = _DEFAULTS.first_shards  # at most this many of a node's first shards at once
    storage_options: dict[str, Any] | None = None
    stream_name: str = DEFAULT_STREAM_NAME  # a name in stream_plugin.streams_registry (for remote/local)
    stream_config: dict[str, Any] | None = None  # extra arguments for that Stream class
    transform: Callable[[Any], Any] | None = None  # applied to each sample (in YAML: "package.module.function")

    def dataset_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``StreamingDataset`` (or a subclass), ``streams`` built, no batch size."""
        kwargs: dict[str, Any] = {item.name: getattr(self, item.name) for item in fields(self)}
        kwargs["streams"] = [spec.build() for spec in self.streams] if self.streams is not None else None
        return kwargs


def as_dataset_spec(name: str, value: DatasetSpec | Mapping[str, Any] | None) -> DatasetSpec | None:
    """Accept a ``DatasetSpec``, a plain dict of its fields (streams as dicts too), or None."""
    if value is None or isinstance(value, DatasetSpec):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{name}: expected a DatasetSpec or a dict of StreamingDataset arguments, found "
            f"{type(value).__name__}; pass DatasetSpec(streams=[StreamSpec(remote=..., local=...)])"
        )
    known = {item.name for item in fields(DatasetSpec)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(
            f"{name}: expected StreamingDataset arguments ({', '.join(sorted(known))}), found unknown "
            f"{unknown}; batch_size and the DataLoader options belong to StreamingDataModule itself"
        )
    options = dict(value)
    if options.get("streams") is not None:
        options["streams"] = [
            stream if isinstance(stream, StreamSpec) else StreamSpec(**stream)
            for stream in options["streams"]
        ]
    return DatasetSpec(**options)
