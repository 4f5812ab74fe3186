"""The simulator's inputs and outputs as plain frozen values: what is read, on what hardware, and what
the run would cost.

``Workload`` is the data and the dataset's settings (the real ``DatasetConfig``); ``Hardware`` is the
cluster and the store; ``simulate`` (``simulate.engine``) turns the two into a ``Simulation``. Units are
in the field names' comments: seconds, bytes, bytes per second, requests per second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stream_plugin.errors import ConfigError, check_int
from stream_plugin.order.data_parallel import (
    DataParallelLayout,
    agree_with_replication,
)
from stream_plugin.order.mixing import StreamWeight
from stream_plugin.reading.config import DatasetConfig

# An MDS index.json's bytes per shard, where the index is not read (a synthetic shape): issue 39 measured
# 275 MB for a million shards (one or two columns; more columns, compression and hashes add to it).
INDEX_BYTES_PER_SHARD = 275


def _positive(
    name: str, value: float | None, *, allow_zero: bool = False, allow_none: bool = False, fix: str
) -> None:
    if value is None and allow_none:
        return
    bad = (
        value is None
        or isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not np.isfinite(value)
        or value < 0
        or (value == 0 and not allow_zero)
    )
    if bad:
        expected = "a finite number >= 0" if allow_zero else "a finite number > 0"
        raise ConfigError(f"{name}: expected {expected}, found {value!r}; {fix}")


@dataclass(frozen=True, eq=False)
class Workload:
    """What the job reads: every shard's size, and the dataset's settings.

    Shards are numbered globally in stream order, as the dataset numbers them. Arrays are int64 (S,).
    """

    samples_per_shard: np.ndarray  # samples in each shard
    stored_bytes: np.ndarray  # bytes a node downloads for each shard (compressed files where compressed)
    raw_bytes: np.ndarray  # bytes of each shard once decompressed (= stored_bytes when not compressed)
    footprint: np.ndarray  # bytes each shard occupies in the node's cache once placed
    requests_per_shard: np.ndarray  # requests one download of the shard makes (one GET per MDS file; a Parquet shard: parquet.request_count)
    shards_per_stream: tuple[int, ...]
    config: DatasetConfig  # batch_size (per device) must be set
    weights: tuple[StreamWeight, ...] = ()  # one per stream; () means no stream sets a weight
    download_retry: int | None = None  # retries after a failed request (a 429 uses none); None: the default
    # Bytes of each stream's index (its index.json, a Parquet stream's too) that every node downloads once
    # before its first shard; () downloads none (a shape without an index)
    index_bytes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        num_shards = len(self.samples_per_shard)
        for name in ("stored_bytes", "raw_bytes", "footprint", "requests_per_shard"):
            array = getattr(self, name)
            if np.shape(array) != (num_shards,):
                raise ConfigError(
                    f"Workload.{name}: expected one value per shard ({num_shards}), found shape {np.shape(array)}; "
                    "build the workload with Workload.synthetic or from an index"
                )
        if sum(self.shards_per_stream) != num_shards:
            raise ConfigError(
                f"Workload.shards_per_stream: expected counts summing to the {num_shards} shards, found "
                f"{list(self.shards_per_stream)}"
            )
        if num_shards == 0 or int(np.sum(self.samples_per_shard)) == 0:
            raise ConfigError(
                "Workload: expected at least one sample, found none; point it at a dataset with samples"
            )
        if self.config.batch_size is None:
            raise ConfigError(
                "Workload.config.batch_size: expected the per-device batch size, found None; pass batch_size"
            )
        check_int(
            "download_retry", self.download_retry, minimum=0, allow_none=True, fix="pass 0 or more retries"
        )
        if self.index_bytes and len(self.index_bytes) != len(self.shards_per_stream):
            raise ConfigError(
                f"Workload.index_bytes: expected one size per stream ({len(self.shards_per_stream)}), found "
                f"{len(self.index_bytes)}; pass each stream's index.json bytes, or () to estimate them"
            )
        if self.weights and len(self.weights) != len(self.shards_per_stream):
            raise ConfigError(
                f"Workload.weights: expected one per stream ({len(self.shards_per_stream)}), found {len(self.weights)}"
            )

    @property
    def num_shards(self) -> int:
        return len(self.samples_per_shard)

    @property
    def num_samples(self) -> int:
        return int(np.sum(self.samples_per_shard))

    @property
    def stream_index_bytes(self) -> tuple[int, ...]:
        """Each stream's index bytes (0 each without ``index_bytes``)."""
        return self.index_bytes or tuple(0 for _ in self.shards_per_stream)

    @property
    def stream_weights(self) -> tuple[StreamWeight, ...]:
        return self.weights or tuple(StreamWeight() for _ in self.shards_per_stream)

    @classmethod
    def synthetic(
        cls,
        *,
        shards: int,
        samples_per_shard: int,
        raw_bytes_per_shard: int,
        stored_bytes_per_shard: int | None = None,
        index_bytes_per_shard: int = 0,
        config: DatasetConfig,
        keep_zip: bool = False,
    ) -> Workload:
        """One stream of ``shards`` equal shards (MosaicML's synthetic shape), whose index takes
        ``index_bytes_per_shard`` a shard (``INDEX_BYTES_PER_SHARD`` for an MDS index.json; 0: none)."""
        check_int("shards", shards, minimum=1, fix="pass the number of shards")
        check_int("samples_per_shard", samples_per_shard, minimum=1, fix="pass samples per shard")
        check_int("raw_bytes_per_shard", raw_bytes_per_shard, minimum=1, fix="pass the shard size in bytes")
        stored = raw_bytes_per_shard if stored_bytes_per_shard is None else stored_bytes_per_shard
        check_int(
            "stored_bytes_per_shard", stored, minimum=1, fix="pass the compressed size, or leave it unset"
        )
        placed = raw_bytes_per_shard + (stored if keep_zip and stored_bytes_per_shard is not None else 0)
        return cls(
            samples_per_shard=np.full(shards, samples_per_shard, np.int64),
            stored_bytes=np.full(shards, stored, np.int64),
            raw_bytes=np.full(shards, raw_bytes_per_shard, np.int64),
            footprint=np.full(shards, placed, np.int64),
            requests_per_shard=np.ones(shards, np.int64),
            shards_per_stream=(shards,),
            config=config,
            index_bytes=(shards * index_bytes_per_shard,) if index_bytes_per_shard else (),
        )


@dataclass(frozen=True)
class Hardware:
    """The cluster, the store and the training loop."""

    nodes: int = 1
    devices_per_node: int = 8  # ranks per node
    workers: int = 8  # DataLoader workers per rank (0: the rank's main process reads)
    bandwidth: float = 1.25e9  # bytes per second into each node, shared by its downloads
    latency: float = 0.0  # seconds from a request to its first byte
    rate_limit: float | None = None  # requests per second the store answers for the whole job; more get 429
    decompress_rate: float | None = None  # bytes of raw output per second per download thread; None: instant
    sample_time: float = 0.0  # seconds a worker spends reading and decoding one sample
    step_time: float = 0.0  # seconds of compute per training step (per batch)
    step_time_per_sample: float = 0.0  # seconds of compute per sample of a device batch (added to step_time)
    worker_start: float = 0.0  # seconds from the first iterator to a worker's first request (fork, its iterator)
    handover: float = 0.0  # seconds from a batch built by a worker to the trainer holding it
    epochs: int = 1
    max_steps: int | None = None  # stop after this many steps (max_duration in batches); None: whole epochs
    download_threads: int = 4  # concurrent downloads of one worker's prefetcher
    prefetch_factor: int = 2  # batches each DataLoader worker keeps ready ahead of the trainer
    # Which ranks read different samples, beside the dataset's replication: a data-parallel size
    # (replicas on consecutive ranks), or a mesh that ranks fill row-major, ((name, size), ...), with the
    # dims that read different samples.
    data_parallel_size: int | None = None
    mesh: tuple[tuple[str, int], ...] | None = None
    data_parallel_dims: tuple[str, ...] | None = None  # None: the dims named as data-parallel ones

    def __post_init__(self) -> None:
        check_int("nodes", self.nodes, minimum=1, fix="pass the number of nodes")
        check_int("devices_per_node", self.devices_per_node, minimum=1, fix="pass GPUs (ranks) per node")
        check_int("workers", self.workers, minimum=0, fix="pass DataLoader num_workers per rank")
        check_int("epochs", self.epochs, minimum=1, fix="pass 1 or more epochs")
        check_int("max_steps", self.max_steps, minimum=1, allow_none=True, fix="pass a step count or None")
        check_int("download_threads", self.download_threads, minimum=1, fix="pass 1 or more threads")
        check_int("prefetch_factor", self.prefetch_factor, minimum=1, fix="pass DataLoader prefetch_factor")
        _positive(
            "bandwidth",
            self.bandwidth,
            fix="pass the node's bandwidth in bytes per second, e.g. 1.25e9 for 10 Gbit/s",
        )
        _positive("latency", self.latency, allow_zero=True, fix="pass seconds to the first byte, e.g. 0.03")
        _positive(
            "rate_limit",
            self.rate_limit,
            allow_none=True,
            fix="pass requests per second, or None for no limit",
        )
        _positive(
            "decompress_rate", self.decompress_rate, allow_none=True, fix="pass bytes per second, or None"
        )
        for name in ("sample_time", "step_time", "step_time_per_sample", "worker_start", "handover"):
            _positive(name, getattr(self, name), allow_zero=True, fix="pass seconds")

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    def data_parallel(self, replication: int | None) -> DataParallelLayout:
        """The data-parallel coordinate of every rank: from ``mesh``, ``data_parallel_size`` or the
        dataset's ``replication`` (which must agree with either)."""
        if self.mesh is not None:
            names = [name for name, _ in self.mesh]
            shape = [size for _, size in self.mesh]
            if int(np.prod(shape)) != self.world_size:
                raise ConfigError(
                    f"mesh: expected dims whose sizes multiply to the world size {self.world_size} (nodes x "
                    f"devices_per_node), found {dict(self.mesh)}; fix the mesh or the hardware"
                )
            layout = DataParallelLayout.of_mesh(shape, names, self.data_parallel_dims)
            agree_with_replication(layout, replication, "mesh")
            return layout
        if self.data_parallel_size is not None:
            size = check_int("data_parallel_size", self.data_parallel_size, minimum=1, fix="pass the ranks that read different samples")
            if self.world_size % size:
                raise ConfigError(
                    f"data_parallel_size: expected a divisor of the world size {self.world_size}, found {size}; "
                    f"pass one of {[d for d in range(1, self.world_size + 1) if self.world_size % d == 0]}"
                )
            layout = DataParallelLayout.consecutive(self.world_size, self.world_size // size)
            agree_with_replication(layout, replication, "data_parallel_size")
            return layout
        return DataParallelLayout.consecutive(self.world_size, replication or 1)

    def node_bands(self, layout: DataParallelLayout) -> tuple[tuple[int, int], ...]:
        """Each node's ``(first, count)`` band of data-parallel coordinates (``DataParallelLayout.node_band``),
        the same width on every node; a ConfigError for a layout the simulator cannot plan by node."""
        bands = tuple(layout.node_band(node, self.devices_per_node) for node in range(self.nodes))
        widths = {band[1] for band in bands if band is not None}
        if any(band is None for band in bands) or len(widths) != 1:
            raise ConfigError(
                f"data-parallel layout: expected every node to read one aligned run of data-parallel "
                f"coordinates of one width, found {list(bands)} ((first, count) per node, None: scattered) for "
                f"{layout.size} coordinates on {self.nodes} nodes of {self.devices_per_node}; the simulator plans "
                "by node: order the mesh so that each node holds whole runs of the data-parallel dims"
            )
        return bands  # type: ignore[return-value]


@dataclass(frozen=True)
class EpochShuffle:
    """How well one epoch is shuffled (see ``benchmarks/shuffle_quality.py`` for the same figures)."""

    spread_median: float  # median over shards of (last read - first read) / epoch length, 0..1
    spread_mean: float
    shards_per_batch: float  # mean distinct shards in a global batch


@dataclass(frozen=True, eq=False)
class Simulation:
    """What the run does, step by step and node by node. Times in seconds from the job's start."""

    workload: Workload
    hardware: Hardware
    step_start: np.ndarray  # float64 (T,): when each step's compute starts (its batch is on every rank)
    step_end: np.ndarray  # float64 (T,)
    wait: np.ndarray  # float64 (T,): seconds the step waited for data after the previous step ended
    epoch_of_step: np.ndarray  # int64 (T,)
    samples_per_step: np.ndarray  # int64 (T,): samples of the global batch
    node_requests: np.ndarray  # int64 (N,): GET requests answered with data (one per file, index included)
    node_throttled: np.ndarray  # int64 (N,): requests answered 429 (each retried)
    node_bytes: np.ndarray  # int64 (N,): bytes downloaded (shards and the index)
    node_downloads: np.ndarray  # int64 (N,): shard downloads
    node_peak_cache: np.ndarray  # int64 (N,): the most bytes the node's cache held (placed and in flight)
    download_once_cache_limit: int  # the smallest cache_limit that downloads no shard twice on any node
    shuffle: tuple[EpochShuffle, ...]  # one per epoch simulated
    notes: tuple[str, ...] = field(default=())  # what the model assumed or could not model, for the report
    # Every request that reached the store: when (s), from which node, and whether it was refused (429).
    # float64 / int64 / bool (R,), in the order the store saw them.
    request_times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    request_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    request_refused: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    @property
    def num_steps(self) -> int:
        return len(self.step_start)

    @property
    def stall_tolerance(self) -> float:
        """A wait shorter than this (1% of a step, at least 1 ms) is not a stall."""
        hw = self.hardware
        batch = self.workload.config.batch_size or 1
        return max(1e-3, 0.01 * (hw.step_time + hw.step_time_per_sample * batch))

    @property
    def stalled_steps(self) -> int:
        return int(np.count_nonzero(self.wait > self.stall_tolerance))

    @property
    def stalls_after_first_batch(self) -> int:
        """Stalled steps after the first: ``stalled_steps`` also counts the start-up wait, which no
        setting avoids (the first shards must be downloaded)."""
        return int(np.count_nonzero(self.wait[1:] > self.stall_tolerance))

    @property
    def total_wait(self) -> float:
        return float(self.wait.sum())

    @property
    def time_to_first_batch(self) -> float:
        return float(self.step_start[0]) if self.num_steps else 0.0

    @property
    def total_time(self) -> float:
        return float(self.step_end[-1]) if self.num_steps else 0.0

    @property
    def throughput(self) -> np.ndarray:
        """Samples per second of each step: its samples over the time since the previous step ended."""
        before = np.concatenate([[0.0], self.step_end[:-1]])
        return self.samples_per_step / np.maximum(self.step_end - before, 1e-12)

    @property
    def mean_throughput(self) -> float:
        """Samples per second over the whole run, start-up included."""
        return float(self.samples_per_step.sum() / self.total_time) if self.total_time > 0 else 0.0

    @property
    def egress_bytes(self) -> int:
        return int(self.node_bytes.sum())

    @property
    def requests(self) -> int:
        return int(self.node_requests.sum())

    def cost(self, price_per_gb: float) -> float:
        """Egress cost at ``price_per_gb`` (per 10**9 bytes)."""
        return self.egress_bytes / 1e9 * price_per_gb

    def summary(self, price_per_gb: float = 0.0) -> dict[str, Any]:
        """The figures of the run as plain JSON values."""
        return {
            "steps": self.num_steps,
            "total_time_s": self.total_time,
            "time_to_first_batch_s": self.time_to_first_batch,
            "stalled_steps": self.stalled_steps,
            "total_wait_s": self.total_wait,
            "mean_throughput_samples_per_s": self.mean_throughput,
            "egress_bytes": self.egress_bytes,
            "egress_cost": self.cost(price_per_gb),
            "requests": self.requests,
            "throttled_requests": int(self.node_throttled.sum()),
            "index_bytes_per_node": int(sum(self.workload.stream_index_bytes)),
            "nodes": [
                {
                    "node": node,
                    "requests": int(self.node_requests[node]),
                    "throttled": int(self.node_throttled[node]),
                    "bytes": int(self.node_bytes[node]),
                    "downloads": int(self.node_downloads[node]),
                    "peak_cache_bytes": int(self.node_peak_cache[node]),
                }
                for node in range(len(self.node_requests))
            ],
            "download_once_cache_limit_bytes": self.download_once_cache_limit,
            "shuffle": [
                {
                    "epoch": epoch,
                    "spread_median": s.spread_median,
                    "spread_mean": s.spread_mean,
                    "shards_per_batch": s.shards_per_batch,
                }
                for epoch, s in enumerate(self.shuffle)
            ],
            "notes": list(self.notes),
        }


__all__ = ["INDEX_BYTES_PER_SHARD", "EpochShuffle", "Hardware", "Simulation", "Workload"]
