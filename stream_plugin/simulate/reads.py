"""What each node reads and when, from the real order: the spans of every shard, step by step.

Each node reads its band of columns of every global batch, exactly what one rank of a job with one
rank per node reads: ``EpochPlanner.rank_batch_pieces`` with that topology gives it, in pieces, as
``reading.node_forecast`` plans it for Belady eviction. Read ``i`` of a node's pass falls in step
``i // band`` (the band: the node's samples of one global batch). Each piece is reduced at once to
each shard's first and last step, so memory follows the shard count, never the sample count.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from stream_plugin.errors import ConfigError
from stream_plugin.order.mixing import samples_per_stream
from stream_plugin.order.topology import Topology
from stream_plugin.reading.epochs import EpochPlanner, check_canonical_nodes
from stream_plugin.reading.shard_table import ShardTable
from stream_plugin.simulate.model import EpochShuffle, Hardware, Workload

_UNREAD = np.iinfo(np.int64).max
_TIME_BITS = 40  # a visit's key: shard id above these bits, the read's time on the node's clock below
_TIME_MASK = (1 << _TIME_BITS) - 1
# Distinct shards per global batch are counted (a sort of every step's reads) up to this many reads
# per epoch; above it the figure is left out and a note says so.
_COUNT_BATCH_SHARDS_UP_TO = 100_000_000
# Runs of at least this many reads (all epochs) plan the nodes' passes in parallel processes.
_PARALLEL_FROM_READS = 50_000_000


@dataclass(frozen=True)
class NodeEpoch:
    """The shards one node reads in one epoch: each shard once, with its first and last step.

    Steps count from the start of the run (epoch offsets added). Arrays int64 (k,), ordered by first step.
    """

    shards: np.ndarray
    first: np.ndarray
    last: np.ndarray
    visits: Visits | None = None  # with ``pin_gap``: the node's visits of its shards (``Visits``)


@dataclass(frozen=True)
class Visits:
    """One node's visits of its shards in one epoch: a visit is a run of reads of one shard whose
    consecutive reads lie at most ``pin_gap`` steps apart (a reader keeps its shard open, pinned, that
    long); between two visits the shard is not pinned and the cache may evict it.

    Steps count from the start of the run. Arrays int64 (v,), ordered by first step.
    """

    shards: np.ndarray
    first: np.ndarray
    last: np.ndarray


@dataclass(frozen=True)
class ReadPlan:
    """Every node's reads of every epoch simulated, and the steps they fall in."""

    epochs: tuple[tuple[NodeEpoch, ...], ...]  # [epoch][node]
    epoch_steps: tuple[int, ...]  # steps of each epoch (its last may be partial)
    samples_per_step: np.ndarray  # int64 (T,): samples of each global batch
    epoch_of_step: np.ndarray  # int64 (T,)
    shuffle: tuple[EpochShuffle, ...]
    notes: tuple[str, ...]


def build_planner(workload: Workload) -> EpochPlanner:
    """The dataset's own planner: its table, its epoch's samples per stream and its order settings."""
    config = workload.config
    counts = np.asarray(workload.samples_per_shard, np.int64)
    edges = np.cumsum((0, *workload.shards_per_stream))
    table = ShardTable.from_counts(
        [counts[begin:end] for begin, end in zip(edges[:-1], edges[1:], strict=True)]
    )
    per_epoch = samples_per_stream(
        table.samples_per_stream.tolist(),
        list(workload.stream_weights),
        epoch_size=config.epoch_size,
        seed=config.shuffle_seed,
    )
    return EpochPlanner(table, per_epoch, config.order_settings)


@dataclass(frozen=True)
class EpochSteps:
    """The global batches of one epoch: ``full`` whole ones, and a partial last one of ``rest`` samples
    unless ``drop_last``."""

    global_batch: int
    full: int
    rest: int
    drop_last: bool

    @property
    def steps(self) -> int:
        return self.full + (1 if self.rest and not self.drop_last else 0)

    def samples_per_step(self) -> np.ndarray:
        """int64 (steps,): the samples of each global batch."""
        sizes = np.full(self.steps, self.global_batch, np.int64)
        if self.steps > self.full:
            sizes[-1] = self.rest
        return sizes


def epoch_steps(workload: Workload, hardware: Hardware, planner: EpochPlanner | None = None) -> EpochSteps:
    """The steps of one epoch of ``workload`` on ``hardware``; ``ConfigError`` where it has none, or where
    the data-parallel ranks do not split evenly over the nodes."""
    config = workload.config
    batch_size = int(config.batch_size or 1)
    layout = hardware.data_parallel(config.replication)
    hardware.node_bands(layout)  # every node reads one band of coordinates
    data_parallel = layout.size
    global_batch = batch_size * data_parallel
    planner = build_planner(workload) if planner is None else planner
    full, rest = planner.batch_counts(global_batch_size=global_batch, device_batch_size=batch_size)
    counted = EpochSteps(global_batch, full, rest, config.drop_last)
    if counted.steps == 0:
        raise ConfigError(
            f"batch_size: expected an epoch of at least one global batch of {global_batch} samples "
            f"(batch_size {batch_size} x {data_parallel} data-parallel ranks), found {planner.epoch_size} samples "
            "per epoch with drop_last=True; lower batch_size or pass drop_last=False"
        )
    return counted


def plan_reads(workload: Workload, hardware: Hardware, pin_gap: int | None = None) -> ReadPlan:
    """Each node's shard spans for every epoch of the run (up to ``hardware.max_steps``); with
    ``pin_gap``, each node's visits of its shards too (``Visits``)."""
    config = workload.config
    planner = build_planner(workload)
    epoch_shape = epoch_steps(workload, hardware, planner)
    global_batch, steps = epoch_shape.global_batch, epoch_shape.steps
    bands = hardware.node_bands(hardware.data_parallel(config.replication))
    band = bands[0][1] * int(config.batch_size or 1)  # a node's samples of a step: its coordinates' batches
    canonical = config.num_canonical_nodes or hardware.nodes
    check_canonical_nodes(planner.epoch_size, canonical)
    run_steps: list[int] = []
    left = hardware.max_steps
    for _ in range(hardware.epochs):
        count = steps if left is None else min(steps, left)
        if count <= 0:
            break
        run_steps.append(count)
        if left is not None:
            left -= count
    sizes = epoch_shape.samples_per_step()
    passes = _PassPlanner(workload, hardware, canonical, global_batch, band, bands, pin_gap)
    tasks = [
        (epoch, node, count, offset, planner.epoch_size <= _COUNT_BATCH_SHARDS_UP_TO)
        for epoch, (count, offset) in enumerate(
            zip(run_steps, np.cumsum([0, *run_steps]).tolist(), strict=False)
        )
        for node in range(hardware.nodes)
    ]
    processes = min(processes_for(planner.epoch_size * len(run_steps)), len(tasks))
    if processes > 1:
        # Forked: the planning processes inherit the workload (no pickling of the shard arrays) and
        # need no importable __main__.
        _WORKER[:] = [passes]
        try:
            with ProcessPoolExecutor(processes, multiprocessing.get_context("fork")) as pool:
                results = list(
                    pool.map(_plan_in_worker, tasks, chunksize=max(1, len(tasks) // (4 * processes)))
                )
        finally:
            _WORKER.clear()
    else:
        results = [passes.plan(*task) for task in tasks]
    epochs: list[tuple[NodeEpoch, ...]] = []
    shuffle: list[EpochShuffle] = []
    notes: list[str] = []
    for epoch, count in enumerate(run_steps):
        mine = results[epoch * hardware.nodes : (epoch + 1) * hardware.nodes]
        nodes = [node for node, _ in mine]
        counted = [per_step for _, per_step in mine if per_step is not None]
        per_step_shards = np.sum(counted, axis=0) if len(counted) == len(mine) else None
        epochs.append(tuple(nodes))
        shuffle.append(_shuffle_figures(nodes, count, per_step_shards))
        if per_step_shards is None and epoch == 0:
            notes.append(
                "shards per batch not counted: batching_method='device_per_stream' plans each rank apart"
                if config.batching_method == "device_per_stream"
                else f"shards per batch not counted: an epoch of {planner.epoch_size} samples is above "
                f"{_COUNT_BATCH_SHARDS_UP_TO}"
            )
    total = sum(run_steps)
    samples = np.concatenate([sizes[:count] for count in run_steps]) if run_steps else np.zeros(0, np.int64)
    epoch_of_step = np.repeat(np.arange(len(run_steps), dtype=np.int64), run_steps)
    assert len(samples) == total
    return ReadPlan(
        epochs=tuple(epochs),
        epoch_steps=tuple(run_steps),
        samples_per_step=samples,
        epoch_of_step=epoch_of_step,
        shuffle=tuple(shuffle),
        notes=tuple(notes),
    )


def processes_for(reads: int) -> int:
    """Processes that plan the nodes' passes: one per core for large runs, else this one."""
    return max(1, min(os.cpu_count() or 1, 8)) if reads >= _PARALLEL_FROM_READS else 1


class _PassPlanner:
    """Plans one node's pass of one epoch (in this process, or in forked planning processes)."""

    def __init__(
        self,
        workload: Workload,
        hardware: Hardware,
        canonical: int,
        global_batch: int,
        band: int,
        bands: tuple[tuple[int, int], ...],
        pin_gap: int | None = None,
    ) -> None:
        self.workload = workload
        self.pin_gap = pin_gap
        self.hardware = hardware
        self.canonical = canonical
        self.global_batch = global_batch
        self.band = band
        self.bands = bands  # each node's (first, count) data-parallel coordinates
        self._built: tuple[EpochPlanner, np.ndarray, np.ndarray] | None = None

    def plan(
        self, epoch: int, node: int, steps: int, offset: int, count_shards: bool
    ) -> tuple[NodeEpoch, np.ndarray | None]:
        if self._built is None:
            num_shards = self.workload.num_shards
            self._built = (
                build_planner(self.workload),
                np.full(num_shards, _UNREAD, np.int64),
                np.full(num_shards, -1, np.int64),
            )
        planner, first, last = self._built
        config = self.workload.config
        reads: list[np.ndarray] | None = None if self.pin_gap is None else []
        if config.batching_method == "device_per_stream":
            # The order depends on the device batch: plan each data-parallel rank of the node (its read
            # i falls in step i // batch_size) and merge their spans. Distinct shards per batch are not
            # counted here (a shard two ranks share would count twice).
            batch = int(config.batch_size or 1)
            first_coordinate, ranks = self.bands[node]
            for slot in range(ranks):
                pieces = planner.rank_batch_pieces(
                    epoch,
                    epoch_batch_size=self.global_batch,
                    num_canonical_nodes=self.canonical,
                    device_batch_size=batch,
                    consumed=0,
                    global_batch_size=self.global_batch,
                    topology=Topology(ranks_per_node=self.global_batch // batch, rank=first_coordinate + slot),
                    drop_last=config.drop_last,
                    shard_ids=True,
                )
                _accumulate(pieces, batch, steps, first, last, None, reads, batch)
            return _extract(first, last, offset, self._visits(reads, offset, batch)), None
        pieces = planner.rank_batch_pieces(
            epoch,
            epoch_batch_size=self.global_batch,
            num_canonical_nodes=self.canonical,
            device_batch_size=self.band,
            consumed=0,
            global_batch_size=self.global_batch,
            topology=Topology(num_nodes=self.global_batch // self.band, rank=self.bands[node][0] // self.bands[node][1]),
            drop_last=config.drop_last,
            shard_ids=True,
        )
        per_step = np.zeros(steps, np.int64) if count_shards else None
        _accumulate(pieces, self.band, steps, first, last, per_step, reads, int(config.batch_size or 1))
        return _extract(first, last, offset, self._visits(reads, offset, self.band)), per_step

    def _visits(self, reads: list[np.ndarray] | None, offset: int, band: int) -> Visits | None:
        """The visits of the reads collected (keys ``shard * 2**40 + time``, ``_accumulate``)."""
        if reads is None or self.pin_gap is None:
            return None
        keys = np.unique(np.concatenate(reads)) if reads else np.zeros(0, np.int64)  # sorted: by shard, time
        shard, time = keys >> _TIME_BITS, keys & _TIME_MASK  # (r,) each
        step = time // band  # (r,)
        starts = np.flatnonzero(np.r_[True, (np.diff(shard) != 0) | (np.diff(step) > self.pin_gap + 1)])
        ends = np.r_[starts[1:], len(keys)] - 1
        order = np.argsort(time[starts], kind="stable")  # by first read, as the node's clock orders reads
        return Visits(shard[starts][order], step[starts][order] + offset, step[ends][order] + offset)


_WORKER: list[_PassPlanner] = []  # the planner the forked planning processes use


def _plan_in_worker(task: tuple[int, int, int, int, bool]) -> tuple[NodeEpoch, np.ndarray | None]:
    return _WORKER[0].plan(*task)


def _accumulate(
    pieces: Iterator[np.ndarray],
    band: int,
    steps: int,
    first: np.ndarray,
    last: np.ndarray,
    per_step_shards: np.ndarray | None,
    reads: list[np.ndarray] | None = None,
    device_batch: int = 1,
) -> None:
    """Fold a pass whose read ``i`` falls in step ``i // band`` into each shard's first and last step
    (``first`` / ``last``: scratch arrays of every shard); ``reads`` collects each piece's reads as keys
    ``shard * 2**40 + time``, the time on the node's clock (``reading.node_forecast``: a step is ``band``
    reads, rank-major columns of ``device_batch`` read at once by the ranks), each shard's first read
    of each step only."""
    read = 0
    row_rest = np.zeros(0, np.int64)  # the reads of a step cut by the end of a piece
    for shards in pieces:  # the shard of each read, in order (the planner's shard_ids)
        if read >= steps * band:
            break
        shards = shards[: steps * band - read]  # (n,)
        step = np.arange(read, read + len(shards), dtype=np.int64) // band  # (n,)
        np.minimum.at(first, shards, step)
        np.maximum.at(last, shards, step)
        if reads is not None:
            column = np.arange(read, read + len(shards), dtype=np.int64) % band  # (n,)
            ranks = max(band // device_batch, 1)
            time = step * band + (column % device_batch) * ranks + column // device_batch  # (n,)
            keys = np.unique((shards << _TIME_BITS) | time)  # (k,): by shard, then time
            first_of_step = np.r_[True, (np.diff(keys >> _TIME_BITS) != 0) | (np.diff((keys & _TIME_MASK) // band) != 0)]
            reads.append(keys[first_of_step])
        if per_step_shards is not None:
            row_rest = _count_step_shards(
                per_step_shards, read // band, np.concatenate([row_rest, shards]), band
            )
        read += len(shards)
    if per_step_shards is not None and len(row_rest):
        per_step_shards[read // band] += len(np.unique(row_rest))


def _extract(first: np.ndarray, last: np.ndarray, offset: int, visits: Visits | None = None) -> NodeEpoch:
    """The shards read (steps ``offset`` later), ordered by first step; leaves the scratch clean."""
    ids = np.flatnonzero(first != _UNREAD)
    begin, end = first[ids] + offset, last[ids] + offset
    first[ids], last[ids] = _UNREAD, -1
    order = np.argsort(begin, kind="stable")
    return NodeEpoch(ids[order], begin[order], end[order], visits)


def _count_step_shards(per_step: np.ndarray, first_step: int, shards: np.ndarray, band: int) -> np.ndarray:
    """Add the distinct shards of each whole step in ``shards`` (reads from the start of step
    ``first_step``) to ``per_step``; return the reads of a last, cut step, for the next piece."""
    whole = len(shards) // band
    rows = np.sort(shards[: whole * band].reshape(whole, band), axis=1)  # (whole, band)
    per_step[first_step : first_step + whole] += (rows[:, 1:] != rows[:, :-1]).sum(axis=1) + 1
    return shards[whole * band :]


def _shuffle_figures(nodes: list[NodeEpoch], steps: int, per_step_shards: np.ndarray | None) -> EpochShuffle:
    spans = [(node.last - node.first) for node in nodes if len(node.shards)]
    spread = np.concatenate(spans).astype(np.float64) / max(steps - 1, 1) if spans else np.zeros(1)
    return EpochShuffle(
        spread_median=float(np.median(spread)),
        spread_mean=float(np.mean(spread)),
        shards_per_batch=float(per_step_shards.mean()) if per_step_shards is not None else float("nan"),
    )


__all__ = [
    "EpochSteps",
    "NodeEpoch",
    "ReadPlan",
    "Visits",
    "build_planner",
    "epoch_steps",
    "plan_reads",
]
