"""What this node reads next, from the order itself: the future that Belady eviction ranks shards by.

The order gives every rank its columns of each global batch, so a node's ranks together read a
contiguous band of columns: exactly what one rank of a job with one rank per node reads. Planning
that rank's pass (``EpochPlanner.rank_batch_pieces`` with that topology) gives the node's reads of
every rank and worker, in order, with no messages between processes; they are reduced piece by
piece to each shard's first and last read (``NodeFuture``), so memory follows the shard count.
Only the shard of each read is needed: the order is planned on spans of shard ids, shuffled as the
sample ids are (``rank_batch_pieces(shard_ids=True)``), so no id is mapped back to its shard.

The node's clock counts its reads row by row (global batch by global batch): a row is ``width``
reads, and at in-batch index ``j`` the node's data-parallel ranks read at the same time, so the read
of rank slot ``k`` at index ``j`` of row ``t`` happens at ``t * width + j * ranks + k``. A
(rank, worker) at position ``p`` of its pass reads row ``start_row + worker + (p // B) * workers``.
The other workers of the node read up to ``workers`` rows behind it, so its clock runs that far
behind its own reads.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from stream_plugin.cache.future import NodeFuture, read_spans, shifted
from stream_plugin.cache.reader_clocks import ReaderPlace
from stream_plugin.errors import ConfigError
from stream_plugin.order.topology import Topology
from stream_plugin.reading.cursor import IterationPlan
from stream_plugin.reading.epochs import EpochPlanner
from stream_plugin.reading.shared_forecast import SharedSpans

_KEEP_PASSES = 3  # spans kept per process: this pass, the next epoch, and one spare


@dataclass(frozen=True)
class NodeClock:
    """Where a (rank, worker)'s pass positions fall on its node's clock (see the module docstring)."""

    start_row: int  # the pass's first global batch
    worker: int
    num_workers: int
    device_batch_size: int  # B: one rank's samples of a row
    ranks: int  # the node's data-parallel ranks: a row of the node is ranks * B reads
    slot: int  # this rank's place among them

    @property
    def width(self) -> int:
        return self.ranks * self.device_batch_size

    @property
    def prefetch_reach(self) -> int:
        """How far ahead (node time) a download ahead may evict: two batches of every worker, what a
        DataLoader keeps in flight, past the other workers' lag."""
        return 3 * self.num_workers * self.width

    @property
    def reader_place(self) -> ReaderPlace:
        """This reader among the node's ranks x workers, and its clock's lag behind its reads (``time``)."""
        return ReaderPlace(
            readers=self.ranks * self.num_workers,
            slot=self.slot * self.num_workers + self.worker,
            lag=self.num_workers * self.width,
        )

    def time(self, position: int) -> int:
        """The node's time when this reader is at ``position`` of its pass, less the other workers' lag."""
        batch, index = divmod(position, self.device_batch_size)
        row = self.start_row + self.worker + batch * self.num_workers - self.num_workers
        return row * self.width + index * self.ranks + self.slot

    def read_times(self, first: int, count: int) -> np.ndarray:
        """The times of the node's reads ``first .. first + count`` of the pass (row-major over its
        columns): int64 (count,)."""
        width = self.width
        column = np.arange(width, dtype=np.int64)  # (width,): rank-major columns of one row
        rank, index = np.divmod(column, self.device_batch_size)
        in_row = index * self.ranks + rank  # (width,): each column's time within its row
        first_row, skip = divmod(first, width)
        rows = np.arange(first_row, first_row + -(-(skip + count) // width), dtype=np.int64) + self.start_row
        return np.add.outer(rows * width, in_row).ravel()[skip : skip + count]  # (count,)


@dataclass(frozen=True)
class PieceClock:
    """The node's time at each position of a piece of a pass that starts ``first`` samples in."""

    clock: NodeClock
    first: int

    def __call__(self, position: int) -> int:
        return self.clock.time(self.first + position)

    @property
    def step(self) -> int:
        """Samples between two moves of the clock: one batch of this reader."""
        return self.clock.device_batch_size


class NodeForecaster:
    """Plans the node's future for each pass this process reads (see the module docstring).

    It keeps the spans of the last passes it planned: the epoch after a pass, planned with it, is the
    next pass's own, so a persistent worker plans each epoch once.
    """

    def __init__(
        self, planner: EpochPlanner, num_shards: int, *, shared: SharedSpans | None = None
    ) -> None:
        self._planner = planner
        self._num_shards = num_shards
        self._shared = shared  # the node's folder of planned passes: one process per node plans each
        self._spans: OrderedDict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def forecast(
        self,
        plan: IterationPlan,
        topology: Topology,
        *,
        device_batch_size: int,
        global_batch_size: int,
        rows_per_epoch: int,
        drop_last: bool,
        batching_method: str,
        epochs_ahead: int = 1,
    ) -> tuple[NodeFuture, NodeClock] | None:
        """The node's reads of ``plan``'s pass and of the ``epochs_ahead`` epochs after it, as a
        ``NodeFuture``, with this reader's clock; None where the node's band of columns is not one
        rank's share (ranks replicated across nodes, or ``device_per_stream`` batching)."""
        band = topology.layout.node_band(topology.node, topology.ranks_per_node)
        if band is None or batching_method == "device_per_stream":
            return None
        first, ranks = band  # the node reads data-parallel coordinates first .. first + ranks - 1
        bands = topology.data_parallel_size // ranks
        width = ranks * device_batch_size
        if width * bands != global_batch_size or plan.epoch_batch_size % bands:
            return None
        clock = NodeClock(
            start_row=plan.start // plan.epoch_batch_size,
            worker=topology.worker,
            num_workers=topology.num_workers,
            device_batch_size=device_batch_size,
            ranks=ranks,
            slot=topology.data_parallel_rank - first,
        )
        # The node's band of columns, planned as the one rank of ``bands`` that reads it.
        node = Topology(num_nodes=bands, rank=first // ranks)
        passes = [(plan.epoch, plan.start, plan.epoch_batch_size)]
        passes += [(plan.epoch + ahead, 0, global_batch_size) for ahead in range(1, epochs_ahead + 1)]
        try:
            spans = [self._pass_spans(node, clock, plan, drop_last, *one_pass) for one_pass in passes]
        except ConfigError:
            return None  # a batching the node's band cannot be planned with: evict least recently used
        return _passes_in_turn(self._num_shards, spans, rows_per_epoch * width), clock

    def _pass_spans(
        self,
        node: Topology,
        clock: NodeClock,
        plan: IterationPlan,
        drop_last: bool,
        epoch: int,
        consumed: int,
        epoch_batch_size: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each shard's first and last read of the node in one pass, on the clock of its epoch."""
        global_batch_size = clock.width * node.num_nodes
        key = (epoch, consumed, epoch_batch_size, global_batch_size, plan.num_canonical_nodes, node.rank, drop_last)
        found = self._spans.get(key)
        if found is not None:
            return found
        if self._shared is None:
            found = self._plan_spans(node, clock, drop_last, epoch, consumed, epoch_batch_size, plan.num_canonical_nodes)
        else:
            found = self._shared.get(
                (*key, clock.ranks, clock.device_batch_size),  # the clock's times depend on both
                self._num_shards,
                partial(self._plan_spans, node, clock, drop_last, epoch, consumed, epoch_batch_size, plan.num_canonical_nodes),
            )
        self._spans[key] = found
        while len(self._spans) > _KEEP_PASSES:
            self._spans.popitem(last=False)
        return found

    def _plan_spans(
        self,
        node: Topology,
        clock: NodeClock,
        drop_last: bool,
        epoch: int,
        consumed: int,
        epoch_batch_size: int,
        num_canonical_nodes: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Plan the node's reads of one pass and reduce them to each shard's first and last read."""
        reads = self._planner.rank_batch_pieces(
            epoch,
            epoch_batch_size=epoch_batch_size,
            num_canonical_nodes=num_canonical_nodes,
            device_batch_size=epoch_batch_size // node.num_nodes,
            consumed=consumed,
            global_batch_size=clock.width * node.num_nodes,
            topology=node,
            drop_last=drop_last,
            shard_ids=True,
        )
        pass_clock = replace(clock, start_row=consumed // epoch_batch_size)

        def pieces() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            first = 0
            for shards in reads:  # (n,) the shard of each of the node's reads, row-major over its columns
                yield pass_clock.read_times(first, len(shards)), shards
                first += len(shards)

        return read_spans(self._num_shards, pieces())


def _passes_in_turn(num_shards: int, spans: list[tuple[np.ndarray, np.ndarray]], epoch_reads: int) -> NodeFuture:
    """The future of passes read one after another, ``epoch_reads`` apart on the clock: pass ``i``'s spans
    (on its own epoch's clock) ``shifted`` ``i * epoch_reads`` later. Written into place (the first pass
    as it is), not stacked afterwards: every process that loads a node's passes pays this, not the plan."""
    first = np.empty((len(spans), num_shards), dtype=np.int64)  # (passes, num_shards)
    last = np.empty((len(spans), num_shards), dtype=np.int64)  # (passes, num_shards)
    for ahead, pass_spans in enumerate(spans):
        first[ahead], last[ahead] = shifted(pass_spans, ahead * epoch_reads) if ahead else pass_spans
    return NodeFuture(first, last)


__all__ = ["NodeClock", "NodeForecaster", "PieceClock"]
