"""Top-level entry point: one epoch's global sample order as a (T, G) array of global batches.

``plan_epoch`` is a pure function of the chosen samples, the ``OrderConfig`` and the epoch. It never
sees the hardware layout: ``partition.rank_worker_batches`` slices its result for one (rank, worker).

Pipeline (each step in its own module):

1. ``batching.plan_slots``: which group (stream, or all streams mixed) fills each slot of each
   global batch, which slots of the last batch stay empty, and how many samples each canonical node
   reads per group.
2. ``layout``: each group's chosen samples laid out in a shard order drawn once per training run, cut into
   one contiguous span per canonical node with exactly those lengths; each epoch permutes the shard
   runs inside each span only, so a node reads the same shards every epoch.
3. ``shuffle``: each span shuffled in place by the configured algorithm.
4. Here: node c's span fills its slots ``[floor(c*G/C), floor((c+1)*G/C))`` of every batch in
   row-major order. Empty slots (only in a partial last batch) hold ``EMPTY``: the order never repeats
   a sample; ``partition`` adds the few repeats that keep data-parallel ranks in step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stream_plugin.errors import ConfigError, check_int
from stream_plugin.order.batching import BATCHING_METHODS, BatchingMethod, SlotPlan, plan_slots
from stream_plugin.order.layout import (
    Chosen,
    DatasetShape,
    ShardRuns,
    group_runs,
    node_shard_order,
    slot_ranges,
)
from stream_plugin.order.shuffle import SpanKey, canonical_shuffle_name, default_block_size, get_shuffle

# Spans are shuffled in this dtype when every global id fits: half the memory of int64.
_INT32_LIMIT = 2**31
EMPTY = -1  # an empty slot of a partial last global batch


@dataclass(frozen=True)
class OrderConfig:
    """Every setting that shapes the global sample order (and nothing that does not)."""

    shuffle: bool = False
    shuffle_algo: str = "block"
    shuffle_seed: int = 9176
    shuffle_block_size: int | None = None  # None: MosaicML's max(4_000_000 // C, 1 << 18)
    num_canonical_nodes: int = 1
    batching_method: BatchingMethod = "random"
    global_batch_size: int = 1
    device_batch_size: int | None = None  # only read by batching_method="device_per_stream"

    def __post_init__(self) -> None:
        canonical_shuffle_name(self.shuffle_algo)  # raises ConfigError for unknown names
        check_int(
            "num_canonical_nodes",
            self.num_canonical_nodes,
            minimum=1,
            fix="pass a multiple of the node count",
        )
        check_int(
            "global_batch_size",
            self.global_batch_size,
            minimum=1,
            fix="pass device batch size x data-parallel ranks",
        )
        if self.shuffle_block_size is not None:
            check_int(
                "shuffle_block_size", self.shuffle_block_size, minimum=1, fix="pass None for the default"
            )
        check_int("shuffle_seed", self.shuffle_seed, fix="pass an int seed")
        if self.batching_method not in BATCHING_METHODS:
            raise ConfigError(
                f"batching_method: expected one of {list(BATCHING_METHODS)}, found {self.batching_method!r}; "
                "pick one of them"
            )
        if self.batching_method == "device_per_stream":
            check_int(
                "device_batch_size",
                self.device_batch_size,
                minimum=1,
                fix="batching_method='device_per_stream' needs it",
            )
            assert self.device_batch_size is not None
            if self.global_batch_size % self.device_batch_size:
                raise ConfigError(
                    f"global_batch_size: expected a multiple of device_batch_size={self.device_batch_size}, "
                    f"found {self.global_batch_size}; use device batch size x data-parallel ranks"
                )

    @property
    def algorithm(self) -> str:
        """The registered shuffle actually applied: ``none`` unless ``shuffle`` is on."""
        return canonical_shuffle_name(self.shuffle_algo) if self.shuffle else "none"

    @property
    def block_size(self) -> int:
        """``shuffle_block_size`` or its default for this many canonical nodes."""
        if self.shuffle_block_size is not None:
            return self.shuffle_block_size
        return default_block_size(self.num_canonical_nodes)


@dataclass(frozen=True, eq=False)
class EpochOrder:
    """One epoch's global sample order: global batch t is ``batches[t]`` on every layout.

    Every chosen sample appears exactly once. Only the last batch may be partial: its empty slots
    hold ``EMPTY`` and are listed in ``pad_positions``.
    """

    batches: np.ndarray  # int64 (T, G): global sample ids, EMPTY in the empty slots of a partial last batch
    pad_positions: np.ndarray  # int64 (num_padded,): flat positions in batches.ravel() of the empty slots
    batching_method: BatchingMethod = "random"
    device_batch_size: int | None = None  # set when the order depends on it (device_per_stream)

    @property
    def num_batches(self) -> int:
        return int(self.batches.shape[0])

    @property
    def global_batch_size(self) -> int:
        return int(self.batches.shape[1])

    @property
    def num_padded(self) -> int:
        """Empty slots of the partial last batch (0 when every batch is full)."""
        return len(self.pad_positions)

    @property
    def num_samples(self) -> int:
        """Samples in the epoch."""
        return self.batches.size - self.num_padded

    @property
    def full_batches(self) -> int:
        """Global batches with no empty slot: all but a partial last one."""
        return self.num_batches - (1 if self.num_padded else 0)

    @property
    def tail(self) -> np.ndarray:
        """The samples of a partial last batch in slot order: int64 (r,), r < G (empty when none)."""
        if not self.num_padded:
            return np.zeros(0, dtype=np.int64)
        last = self.batches[-1]
        return last[last != EMPTY]

    def real_flat(self) -> np.ndarray:
        """The epoch's samples in order: int64 (num_samples,). A copy."""
        flat = self.batches.reshape(-1)
        if not self.num_padded:
            return flat.copy()
        keep = np.ones(flat.size, dtype=bool)
        keep[self.pad_positions] = False
        return flat[keep]


def _fill_from_span(
    out: np.ndarray, runs: ShardRuns, begin: int, end: int, key: SpanKey, algorithm: str
) -> None:
    """Copy group positions [begin, end) into ``out`` (1-D) and shuffle them in place."""
    bounds = runs.copy_range(begin, end, out)
    get_shuffle(algorithm)(out, bounds, key)


def _assemble_one_group(
    out: np.ndarray,
    runs: ShardRuns,
    slots: SlotPlan,
    edges: np.ndarray,
    config: OrderConfig,
    epoch: int,
    dtype: np.dtype,
) -> list[np.ndarray]:
    """Fast path for one group: node c's span, then its empty tail slots, fill its columns row-major."""
    num_batches, G = out.shape
    pad_positions: list[np.ndarray] = []
    begin = 0
    for node, (lo, hi) in enumerate(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True)):
        real = int(slots.span_lengths[node, 0])
        pad = int(slots.pad_per_node[node])
        key = SpanKey(config.shuffle_seed, epoch, (0, node), config.block_size)
        # With one canonical node the columns are the whole array: shuffle in place, no copy.
        buffer = out.reshape(-1) if hi - lo == G else np.empty(num_batches * (hi - lo), dtype=dtype)
        _fill_from_span(buffer[:real], runs, begin, begin + real, key, config.algorithm)
        begin += real
        if pad:
            buffer[real:] = EMPTY
            flat_cols = np.arange(real, real + pad)  # positions within the node's (T, g_c) block
            rows, cols = np.divmod(flat_cols, hi - lo)
            pad_positions.append(rows * G + lo + cols)
        if hi - lo != G:
            out[:, lo:hi] = buffer.reshape(num_batches, hi - lo)
    return pad_positions


def _assemble_groups(
    out: np.ndarray,
    runs_per_group: list[ShardRuns],
    slots: SlotPlan,
    edges: np.ndarray,
    config: OrderConfig,
    epoch: int,
    dtype: np.dtype,
) -> None:
    """General path: node c's span of group g fills the node's slots of group g, row-major."""
    assert slots.group_of_slot is not None
    begin = np.zeros(len(runs_per_group), dtype=np.int64)
    for node, (lo, hi) in enumerate(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True)):
        block = out[:, lo:hi]  # (T, g_c) view
        groups = slots.group_of_slot[:, lo:hi]
        for group, runs in enumerate(runs_per_group):
            length = int(slots.span_lengths[node, group])
            if not length:
                continue
            key = SpanKey(config.shuffle_seed, epoch, (group, node), config.block_size)
            span = np.empty(length, dtype=dtype)
            _fill_from_span(span, runs, int(begin[group]), int(begin[group]) + length, key, config.algorithm)
            block[groups == group] = span
            begin[group] += length


@dataclass(frozen=True, eq=False)
class EpochLayout:
    """Everything an epoch's order is built from, before any span is shuffled: cheap to compute."""

    slots: SlotPlan
    runs_per_group: tuple[ShardRuns, ...]  # each group's runs in the order its nodes read them this epoch
    edges: np.ndarray  # int64 (C + 1,): slot ranges of the canonical nodes
    dtype: np.dtype  # spans are shuffled in this dtype

    @property
    def num_samples(self) -> int:
        """Samples in the epoch: every slot but the empty ones of a partial last batch."""
        return self.slots.num_batches * int(self.edges[-1]) - int(self.slots.pad_per_node.sum())

    def as_shard_ids(self) -> EpochLayout:
        """This layout with spans of shard ids (int64) instead of sample ids (``ShardRuns.as_shard_ids``):
        shuffled alike, read alike, so each place of the order holds its sample's shard."""
        runs = tuple(runs.as_shard_ids() for runs in self.runs_per_group)
        return EpochLayout(self.slots, runs, self.edges, np.dtype(np.int64))


def epoch_layout(
    shape: DatasetShape, chosen_per_stream: Sequence[Chosen], config: OrderConfig, epoch: int
) -> EpochLayout:
    """Check the inputs, plan the slots and lay out each group's runs as its nodes read them this epoch."""
    if len(chosen_per_stream) != shape.num_streams:
        raise ConfigError(
            f"chosen_per_stream: expected one array per stream ({shape.num_streams}), found "
            f"{len(chosen_per_stream)}; pass the sampler's output for every stream, empty arrays included"
        )
    epoch = check_int("epoch", epoch, minimum=0, fix="pass the epoch number")
    sizes = np.array([len(chosen) for chosen in chosen_per_stream], dtype=np.int64)  # (S,)
    slots = plan_slots(
        sizes,
        method=config.batching_method,
        global_batch_size=config.global_batch_size,
        num_canonical_nodes=config.num_canonical_nodes,
        device_batch_size=config.device_batch_size,
        shuffle=config.shuffle,
        seed=config.shuffle_seed,
        epoch=epoch,
    )
    runs_per_group = []
    # Where each node's span of each group starts, then where the last one ends: int64 (C + 1, num_groups).
    span_begins = np.zeros((config.num_canonical_nodes + 1, len(slots.groups)), dtype=np.int64)
    np.cumsum(slots.span_lengths, axis=0, out=span_begins[1:])
    for group, streams in enumerate(slots.groups):
        runs = group_runs(shape, chosen_per_stream, streams)
        if config.algorithm != "none":
            shard_range = (shape.stream_shard_range(streams[0])[0], shape.stream_shard_range(streams[-1])[1])
            runs = node_shard_order(
                runs, shard_range, span_begins[:, group], config.shuffle_seed, epoch, group
            )
        runs_per_group.append(runs)
    edges = slot_ranges(config.global_batch_size, config.num_canonical_nodes)  # (C + 1,)
    dtype = np.dtype(np.int32 if shape.num_samples < _INT32_LIMIT else np.int64)
    return EpochLayout(slots, tuple(runs_per_group), edges, dtype)


def plan_epoch(
    shape: DatasetShape, chosen_per_stream: Sequence[Chosen], config: OrderConfig, epoch: int
) -> EpochOrder:
    """The global sample order of ``epoch``: global batches of global sample ids.

    ``chosen_per_stream[s]`` holds stream s's chosen stream-local sample ids for this epoch, sorted
    (repeats for upsampling), or ``AllSamples``. The result does not depend on nodes, ranks or
    workers. Batching methods that keep whole batches only (all but ``random``) leave the rest of a
    stream out of the epoch. ``order.chunked`` builds one (rank, worker)'s share of the same order
    without building the whole.
    """
    layout = epoch_layout(shape, chosen_per_stream, config, epoch)
    slots, edges, dtype = layout.slots, layout.edges, layout.dtype
    epoch = int(epoch)
    out = np.empty((slots.num_batches, config.global_batch_size), dtype=np.int64)  # (T, G)
    if slots.group_of_slot is None:
        pad_positions = _assemble_one_group(out, layout.runs_per_group[0], slots, edges, config, epoch, dtype)
        flat_pads = np.sort(np.concatenate(pad_positions)) if pad_positions else np.zeros(0, np.int64)
    else:
        _assemble_groups(out, list(layout.runs_per_group), slots, edges, config, epoch, dtype)
        flat_pads = np.zeros(0, np.int64)
    out.setflags(write=False)  # callers get views of it: nobody may change the epoch's order
    return EpochOrder(
        batches=out,
        pad_positions=flat_pads.astype(np.int64),
        batching_method=config.batching_method,
        device_batch_size=config.device_batch_size if config.batching_method == "device_per_stream" else None,
    )
