"""A dataset's shape, built once: its streams opened, what one sample is, and how its epochs are planned.

``plan_dataset`` is the one factory: it opens the streams (fetches each index once), asks the
``sample_table`` hook what one sample is (``StreamingDataset.sample_table``; the default keeps the
streams' samples), and derives from that table what the order needs: each stream's samples per epoch,
the ``EpochPlanner`` and the resume-state fingerprint. The result, ``DatasetPlan``, is a frozen value;
``StreamingDataset`` is a thin iterable over it and a cursor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from stream_plugin.format.read_options import check_decode_columns, check_zero_copy_columns
from stream_plugin.order.mixing import samples_per_stream, validate_weights
from stream_plugin.reading.config import DatasetConfig
from stream_plugin.reading.epochs import EpochPlanner
from stream_plugin.reading.process_shards import ProcessShards, check_readers_fit
from stream_plugin.reading.shard_access import StreamCacheSpec
from stream_plugin.reading.shard_table import ShardTable
from stream_plugin.reading.sources import OpenedStreams, open_streams, refuse_unsafe_columns
from stream_plugin.reading.stream import DownloadSettings, Stream
from stream_plugin.reading.world import World


@dataclass(frozen=True, eq=False)
class SampleTable:
    """What one sample of a dataset is: where each lives (``table``: samples per shard, numbered
    globally) and the ``fingerprint`` that names the definition, so that a resume state taken under
    another definition is refused."""

    table: ShardTable
    fingerprint: str


@dataclass(frozen=True, eq=False)
class StreamSamples:
    """What a ``sample_table`` hook starts from: the streams' samples as their indexes list them."""

    samples: SampleTable  # one sample per index entry; fingerprint of the data and the order settings
    opened: OpenedStreams  # each stream's index (entries, digests) and cache
    readers: ProcessShards  # reads the shards in this process: ``readers.access().reader(shard_id)``


@dataclass(frozen=True, eq=False)
class DatasetPlan:
    """Everything a dataset's order and reads derive from; built by ``plan_dataset``, never changed."""

    opened: OpenedStreams  # each stream's index and cache
    shards: ShardTable  # the streams' samples per shard, as the indexes list them: what is read
    table: ShardTable  # the dataset's samples per shard (``shards`` unless a hook defines others)
    samples_per_stream_per_epoch: np.ndarray  # int64 (num_streams,): after up- and down-sampling
    planner: EpochPlanner  # each epoch's order over ``table``
    fingerprint: str  # of the data and every setting that shapes the order

    @property
    def cache_specs(self) -> list[StreamCacheSpec]:
        return self.opened.cache_specs


def keep_stream_samples(streams: StreamSamples) -> SampleTable:
    """The default ``sample_table`` hook: a sample is an index entry."""
    return streams.samples


def plan_dataset(
    streams: Sequence[Stream],
    config: DatasetConfig,
    world: World,
    downloads: DownloadSettings,
    *,
    sample_table: Callable[[StreamSamples], SampleTable] = keep_stream_samples,
) -> tuple[DatasetPlan, ProcessShards]:
    """Open ``streams`` (``downloads`` for those that set none) and plan the dataset over the samples
    ``sample_table`` defines. Also returns this process's readers of the shards (they reuse the stores
    that opened the streams)."""
    weights = [stream.weight for stream in streams]
    validate_weights(weights, epoch_size=config.epoch_size)
    stores, opened = open_streams(streams, downloads, cache_limit=config.cache_limit, eviction=config.eviction)
    refuse_unsafe_columns(opened.representatives, allow_unsafe_types=config.allow_unsafe_types)
    check_readers_fit(opened, config.cache_limit, world, num_workers=0)
    shards = ShardTable.from_counts(opened.samples_per_shard_per_stream)
    check_decode_columns(config.read_options.decode, opened.representatives, source="StreamingDataset")
    check_zero_copy_columns(config.read_options.zero_copy, opened.representatives, source="StreamingDataset")
    readers = ProcessShards(
        opened,
        shards,
        world,
        allow_unsafe_types=config.allow_unsafe_types,
        read_options=config.read_options,
        stores=stores,
        start_stagger=config.start_stagger,
        first_shards=config.first_shards,
    )
    fingerprint = config.fingerprint(opened.index_digests, [repr(weight) for weight in weights])
    defined = sample_table(StreamSamples(SampleTable(shards, fingerprint), opened, readers))
    per_epoch = samples_per_stream(
        defined.table.samples_per_stream.tolist(), weights, epoch_size=config.epoch_size, seed=config.shuffle_seed
    )
    resolve_stream_weights(streams, defined.table.samples_per_stream, per_epoch)
    plan = DatasetPlan(
        opened=opened,
        shards=shards,
        table=defined.table,
        samples_per_stream_per_epoch=per_epoch,
        planner=EpochPlanner(defined.table, per_epoch, config.order_settings),
        fingerprint=defined.fingerprint,
    )
    return plan, readers


def resolve_stream_weights(streams: Sequence[Stream], underlying: np.ndarray, chosen: np.ndarray) -> None:
    """Give each stream the proportion, repeat and choose the dataset derived, as MosaicML does."""
    total = sum(int(count) for count in chosen) or 1
    given = [stream.weight.proportion for stream in streams]
    relative = all(value is not None for value in given)
    given_total = sum(value for value in given if value is not None) or 1.0
    for stream, samples, choose, proportion in zip(streams, underlying.tolist(), chosen, given):
        stream.resolve_weights(
            proportion=proportion / given_total
            if relative and proportion is not None
            else int(choose) / total,
            repeat=int(choose) / samples if samples else 0.0,
            choose=int(choose),
        )


__all__ = [
    "DatasetPlan",
    "SampleTable",
    "StreamSamples",
    "keep_stream_samples",
    "plan_dataset",
    "resolve_stream_weights",
]
