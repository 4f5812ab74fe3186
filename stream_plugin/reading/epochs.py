"""From dataset shape and settings to each epoch's global order: the glue over the pure ``order`` maths.

A process reading an epoch plans only its own batches (``rank_batch_pieces``, chunked planning), so
its memory follows its share of the epoch. The whole order of an epoch is ``order.plan.plan_epoch`` over
the same inputs (``OrderSettings.order_config`` and ``chosen_samples``), for checks and tools.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from stream_plugin.errors import ConfigError
from stream_plugin.order.batching import epoch_batches
from stream_plugin.order.chunked import iter_rank_batches
from stream_plugin.order.layout import AllSamples, Chosen
from stream_plugin.order.plan import DatasetShape, OrderConfig
from stream_plugin.order.sampling import epoch_samples
from stream_plugin.order.shuffle import is_positional
from stream_plugin.order.topology import Topology
from stream_plugin.reading.shard_table import ShardTable


def check_canonical_nodes(epoch_size: int, num_canonical_nodes: int) -> None:
    """Refuse more canonical nodes than samples in an epoch (MosaicML only warns, then repeats samples)."""
    if num_canonical_nodes > epoch_size:
        raise ConfigError(
            f"num_canonical_nodes: expected at most {epoch_size} (the epoch's samples: each canonical node "
            f"needs at least one), found {num_canonical_nodes} (The number of samples assigned to a canonical node "
            f"would be zero); pass num_canonical_nodes={max(1, epoch_size)} "
            "or fewer, or a larger epoch_size"
        )


@dataclass(frozen=True)
class OrderSettings:
    """Every setting that shapes the global order, except the global batch size and canonical nodes."""

    shuffle: bool
    shuffle_algo: str
    shuffle_seed: int
    shuffle_block_size: int | None
    batching_method: str
    sampling_method: str
    sampling_granularity: int

    def order_config(self, *, global_batch_size: int, num_canonical_nodes: int, device_batch_size: int) -> OrderConfig:
        """The ``order`` maths' settings of an epoch begun with ``global_batch_size``."""
        return OrderConfig(
            shuffle=self.shuffle,
            shuffle_algo=self.shuffle_algo,
            shuffle_seed=self.shuffle_seed,
            shuffle_block_size=self.shuffle_block_size,
            num_canonical_nodes=num_canonical_nodes,
            batching_method=self.batching_method,  # type: ignore[arg-type]
            global_batch_size=global_batch_size,
            device_batch_size=device_batch_size,
        )


class EpochPlanner:
    """Plans the epochs of one dataset: each rank's batches, and the counts of an epoch."""

    def __init__(self, table: ShardTable, samples_per_stream: np.ndarray, settings: OrderSettings) -> None:
        self._table = table
        self._counts = samples_per_stream
        self._settings = settings
        self._shape = table.shape

    @property
    def settings(self) -> OrderSettings:
        return self._settings

    @property
    def samples_per_stream(self) -> np.ndarray:
        """int64 (num_streams,): each stream's samples per epoch."""
        return self._counts

    @property
    def epoch_size(self) -> int:
        return int(self._counts.sum())

    def batch_counts(self, *, global_batch_size: int, device_batch_size: int) -> tuple[int, int]:
        """``(full global batches, samples of the partial last one)`` per epoch, without planning one."""
        return epoch_batches(
            self._counts,
            method=self._settings.batching_method,
            global_batch_size=global_batch_size,
            device_batch_size=device_batch_size,
        )

    def chosen_samples(self, epoch: int) -> list[np.ndarray]:
        """The stream-local sample ids each stream contributes to ``epoch`` (sorted, repeats allowed)."""
        settings = self._settings
        table = self._table
        per_stream_shards = [
            table.samples_per_shard[first : first + count]
            for first, count in zip(table.shard_offset_per_stream.tolist(), table.shards_per_stream.tolist(), strict=True)
        ]
        return epoch_samples(
            self._table.samples_per_stream.tolist(),
            self._counts.tolist(),
            per_stream_shards,
            method=settings.sampling_method,  # type: ignore[arg-type]
            granularity=settings.sampling_granularity,
            seed=settings.shuffle_seed,
            epoch=epoch,
        )

    def _planning_chosen(self, epoch: int) -> list[Chosen]:
        """``chosen_samples``, with ``AllSamples`` for a stream that gives each sample once (no array)."""
        sizes = self._table.samples_per_stream
        if np.array_equal(np.asarray(sizes), np.asarray(self._counts)):
            return [AllSamples(int(size)) for size in np.asarray(sizes).tolist()]
        return list(self.chosen_samples(epoch))

    def _rank_inputs(
        self, epoch: int, epoch_batch_size: int, num_canonical_nodes: int, device_batch_size: int
    ) -> tuple[DatasetShape, list[Chosen], OrderConfig, int]:
        """The shape, chosen samples, order settings and epoch a rank's planning starts from."""
        config = self._settings.order_config(
            global_batch_size=epoch_batch_size,
            num_canonical_nodes=num_canonical_nodes,
            device_batch_size=device_batch_size,
        )
        return self._shape, self._planning_chosen(epoch), config, epoch

    def rank_batch_pieces(
        self,
        epoch: int,
        *,
        epoch_batch_size: int,
        num_canonical_nodes: int,
        device_batch_size: int,
        consumed: int,
        global_batch_size: int,
        topology: Topology,
        drop_last: bool,
        shard_ids: bool = False,
    ) -> Iterator[np.ndarray]:
        """The sample ids ``topology``'s (rank, worker) reads of ``epoch`` from ``consumed`` on, in order,
        in pieces, each planned when asked for (``iter_rank_batches``): only what it reads is planned.

        ``shard_ids``: the shard of each read instead, from spans of shard ids where the shuffle allows
        (``iter_rank_batches``), else the sample ids' shards (``ShardTable.shards_of``)."""
        inputs = self._rank_inputs(epoch, epoch_batch_size, num_canonical_nodes, device_batch_size)
        positional = shard_ids and is_positional(inputs[2].algorithm)
        pieces = iter_rank_batches(
            *inputs,
            consumed=consumed,
            global_batch_size=global_batch_size,
            topology=topology,
            drop_last=drop_last,
            shard_ids=positional,
        )
        if shard_ids and not positional:  # a user's shuffle may move samples by their values
            return map(self._table.shards_of, pieces)
        return pieces
