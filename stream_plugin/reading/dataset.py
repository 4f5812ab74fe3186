"""``StreamingDataset``: a drop-in for MosaicML Streaming 0.13's, with a layout-independent order.

The dataset is configuration plus a position. Each epoch's global order comes from the pure ``order``
maths; each (rank, worker) reads its slice of it. Resuming recomputes the order from a few numbers
(``state_dict``), so no data is replayed. Process-local things (caches, open shards) are rebuilt in
every DataLoader worker and never pickled.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset

from stream_plugin.cache import StatsSnapshot, node_stats
from stream_plugin.errors import ConfigError, ConfigTypeError, StateError
from stream_plugin.format.index import ShardEntry
from stream_plugin.order.batching import BATCHING_METHODS as BATCHING_METHODS  # the choices, for callers
from stream_plugin.order.mixing import samples_per_stream, validate_weights
from stream_plugin.order.partition import (
    check_consumed_count,
    needs_rechunk,
    rank_last_size,
    remaining_counts,
)
from stream_plugin.order.plan import EpochOrder
from stream_plugin.order.sampling import SAMPLING_METHODS as SAMPLING_METHODS
from stream_plugin.order.shuffle import shuffle_choices
from stream_plugin.order.topology import Topology
from stream_plugin.reading.config import DEFAULTS, DatasetConfig
from stream_plugin.reading.cursor import EpochCursor, Handoff, IterationPlan
from stream_plugin.reading.dataset_compat import (
    MosaicNames,
    check_batch_size_in_workers,
    check_canonical_nodes,
    resolve_stream_weights,
)
from stream_plugin.reading.epochs import EpochPlanner
from stream_plugin.reading.heap import settle_heap
from stream_plugin.reading.iteration import PerSample, chain_blocks, sample_blocks
from stream_plugin.reading.node_forecast import NodeClock, NodeForecaster, PieceClock
from stream_plugin.reading.passes import LoaderPass
from stream_plugin.reading.sample_access import select_samples
from stream_plugin.reading.shard_access import ShardAccess
from stream_plugin.reading.shard_table import ShardTable, Spanner
from stream_plugin.reading.sources import (
    check_cache_limit,
    open_streams,
    readers_within_limit,
    refuse_unsafe_columns,
)
from stream_plugin.reading.state import STATE_VERSION, ResumeState, check_against_dataset, state_mapping
from stream_plugin.reading.stream import DOWNLOAD_DEFAULTS, DownloadSettings, Stream
from stream_plugin.reading.stream_registry import build_streams
from stream_plugin.reading.world import World, detect_worker, detect_world

# The settings a write is refused for once the dataset is built (every option of DatasetConfig); the
# loader's can be bound once with bind_loader.
_SETTINGS = frozenset(item.name for item in fields(DatasetConfig))
_BIND = "StreamingDataLoader binds it with dataset.bind_loader(batch_size=..., drop_last=...)"
_LOADER_SETTING_FIXES = {
    "batch_size": f"pass batch_size= to the dataset when it is built, or to the loader ({_BIND})",
    "drop_last": f"pass drop_last= to the loader ({_BIND})",
}
_READERS_UNDER_LIMIT = 2  # open shards per process at the smallest workable cache_limit
# Without a limit an open shard costs one memory map (no descriptor); stay far below vm.max_map_count.
_READERS_WITHOUT_LIMIT = 8192


def _checked_world(world: World) -> World:
    """A caller's ``World``, checked against the layout the sample order assumes."""
    if not isinstance(world, World):
        raise ConfigError(
            f"world: expected a stream_plugin.World or None, found {type(world).__name__}; pass "
            "World(rank=..., world_size=..., local_rank=..., local_world_size=...) or leave it None to detect it"
        )
    # The order derives each rank's node from rank // local_world_size; a different local_rank means the
    # caller's layout is not the one the samples would be split by.
    expected_local_rank = world.rank % world.local_world_size
    if world.local_rank != expected_local_rank:
        raise ConfigError(
            f"world.local_rank: expected rank % local_world_size = {world.rank} % {world.local_world_size} = "
            f"{expected_local_rank} (ranks fill nodes in order), found {world.local_rank}; check the rank and "
            "local_world_size the World was built from"
        )
    return world


class StreamingDataset(MosaicNames, IterableDataset):
    """Streams samples from one or more ``Stream``s in a deterministic, elastic, resumable order.

    Arguments and their meaning follow MosaicML Streaming 0.13. ``batch_size`` is the per-device batch
    size; pass it (or use ``StreamingDataLoader``, which fills it in) for deterministic resumption.
    The settings are frozen once the dataset is built (``config``): a loader's ``batch_size`` and
    ``drop_last`` reach it once, through ``bind_loader``.

    One argument is our own: ``world``, this process's place in the job (a ``stream_plugin.World``).
    Left as None, it is detected from ``torch.distributed`` and the launcher's environment variables
    (see ``stream_plugin.reading.world``). Pass one when the caller knows the layout better than the environment,
    e.g. a framework whose launcher does not export ``LOCAL_WORLD_SIZE``; it is used as given (and kept
    when the dataset is pickled to DataLoader workers), and its ``local_rank`` must be
    ``rank % local_world_size``: ranks fill nodes in order.

    Another is ``storage_options``, for the single-stream form (``remote=``): options of the remote's
    store (an endpoint, credentials); with ``streams=``, give each ``Stream`` its own.

    And ``eviction``, which shard leaves a full cache (``cache_limit``): ``"belady"`` (default) evicts
    the shard this node reads again farthest ahead, computed from the order by every process (no
    messages), and downloads ahead only in the order the node needs shards; ``"lru"`` evicts the least
    recently used one, as MosaicML does.

    And ``transform``: a function applied to every sample after it is read (in iteration and in
    ``dataset[i]``), at the cost of one call. It must pickle (it travels to DataLoader workers). A
    subclass that overrides ``get_item`` (MosaicML's way to transform samples) works too, and its
    ``super().get_item(i)`` costs about what the plain read does while the dataset iterates.
    """

    def __init__(
        self,
        *,
        streams: Sequence[Stream] | None = None,
        remote: str | None = None,
        local: str | None = None,
        split: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        download_retry: int = DOWNLOAD_DEFAULTS.download_retry,
        download_timeout: float = DOWNLOAD_DEFAULTS.download_timeout,
        validate_hash: str | None = DOWNLOAD_DEFAULTS.validate_hash,
        keep_zip: bool = DOWNLOAD_DEFAULTS.keep_zip,
        epoch_size: int | str | None = DEFAULTS.epoch_size,
        predownload: int | None = DEFAULTS.predownload,
        cache_limit: int | str | None = DEFAULTS.cache_limit,
        eviction: str = DEFAULTS.eviction,
        sampling_method: str = DEFAULTS.sampling_method,
        sampling_granularity: int = DEFAULTS.sampling_granularity,
        partition_algo: str = DEFAULTS.partition_algo,
        num_canonical_nodes: int | None = DEFAULTS.num_canonical_nodes,
        batch_size: int | None = DEFAULTS.batch_size,
        shuffle: bool = DEFAULTS.shuffle,
        shuffle_algo: str = DEFAULTS.shuffle_algo,
        shuffle_seed: int = DEFAULTS.shuffle_seed,
        shuffle_block_size: int | None = DEFAULTS.shuffle_block_size,
        batching_method: str = DEFAULTS.batching_method,
        allow_unsafe_types: bool = DEFAULTS.allow_unsafe_types,
        replication: int | None = DEFAULTS.replication,
        stream_name: str = "stream",
        stream_config: dict[str, Any] | None = None,
        world: World | None = None,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        super().__init__()
        stream_defaults = {
            "remote": remote,
            "local": local,
            "split": split,
            "download_retry": download_retry,
            "download_timeout": download_timeout,
            "validate_hash": validate_hash,
            "keep_zip": keep_zip,
        }
        if storage_options is not None:
            if streams is not None:
                raise ConfigError(
                    "storage_options: expected it with remote/local (one stream), found it with streams; "
                    "pass Stream(..., storage_options={...}) for each stream instead"
                )
            stream_config = {**(stream_config or {}), "storage_options": storage_options}
        self.streams = build_streams(
            streams, defaults=stream_defaults, stream_name=stream_name, stream_config=stream_config
        )
        self.split = split
        self._config = DatasetConfig.from_arguments(
            epoch_size=epoch_size,
            predownload=predownload,
            cache_limit=cache_limit,
            eviction=eviction,
            sampling_method=sampling_method,
            sampling_granularity=sampling_granularity,
            partition_algo=partition_algo,
            num_canonical_nodes=num_canonical_nodes,
            batch_size=batch_size,
            shuffle=shuffle,
            shuffle_algo=shuffle_algo,
            shuffle_seed=shuffle_seed,
            shuffle_block_size=shuffle_block_size,
            batching_method=batching_method,
            allow_unsafe_types=allow_unsafe_types,
            replication=replication,
        )
        defaults = DownloadSettings(
            download_retry=download_retry,
            download_timeout=float(download_timeout),
            validate_hash=validate_hash,
            keep_zip=keep_zip,
        )
        # The settings in force (_config): the arguments' (_built_config), then with a loader's once bound
        # (bind_loader, the one place that replaces it).
        self._built_config = self._config
        self._loader_bound = False
        self._warned_batch_size = False  # the "assuming 1" warning, once per dataset
        weights = [stream.weight for stream in self.streams]
        validate_weights(weights, epoch_size=self._config.epoch_size)

        self.world: World = detect_world() if world is None else _checked_world(world)
        self._config.data_parallel_size(self.world.world_size)  # a replication that divides the world
        stores, opened = open_streams(
            self.streams, defaults, cache_limit=self.cache_limit, eviction=self._config.eviction
        )
        self._opened = opened
        refuse_unsafe_columns(opened.representatives, allow_unsafe_types=self.allow_unsafe_types)
        # Reused by this process's shard access only (never pickled: a worker opens its own).
        self._stores: list[Any] | None = stores
        self._stores_pid = os.getpid()
        self.check_cache_limit(num_workers=0)
        self._cache_specs = opened.cache_specs
        self._table = ShardTable.from_counts(opened.samples_per_shard_per_stream)
        self._samples_per_stream_per_epoch = samples_per_stream(
            self._table.samples_per_stream.tolist(),
            weights,
            epoch_size=self._config.epoch_size,
            seed=self.shuffle_seed,
        )
        resolve_stream_weights(
            self.streams, self._table.samples_per_stream, self._samples_per_stream_per_epoch
        )
        self._planner = EpochPlanner(
            self._table, self._samples_per_stream_per_epoch, self._config.order_settings
        )
        self._fingerprint = self._config.fingerprint(
            opened.index_digests, [repr(stream.weight) for stream in self.streams]
        )
        # Position bookkeeping; workers receive a copy when the loader starts them.
        self._cursor = EpochCursor()
        self._resumed_canonical_nodes: int | None = None
        if transform is not None and not callable(transform):
            raise ConfigTypeError(
                f"transform: expected a function of one sample, or None, found {type(transform).__name__}"
            )
        self.transform = transform
        # Process-local; rebuilt lazily after pickling.
        self._access: ShardAccess | None = None
        self._forecaster: NodeForecaster | None = None
        # [sample id, read, offset] of the sample the iteration is fetching through an overridden
        # get_item, so that super().get_item(sample_id) reads it without looking it up again.
        self._next_read: list[Any] = [None, None, 0]

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_access"] = None
        state["_forecaster"] = None
        state["_stores"] = None
        state["_next_read"] = [None, None, 0]
        return state

    # ------------------------------------------------------------------ settings (frozen, read from the config)
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SETTINGS:
            fix = _LOADER_SETTING_FIXES.get(name, f"build the dataset with {name}={value!r} instead")
            raise AttributeError(
                f"StreamingDataset.{name}: expected no write once the dataset is built (its settings are "
                f"frozen), found an assignment of {value!r}; {fix}"
            )
        super().__setattr__(name, value)

    @property
    def config(self) -> DatasetConfig:
        """The dataset's settings, checked: a frozen value (with a loader's once ``bind_loader`` ran)."""
        return self._config

    def bind_loader(self, *, batch_size: int | None, drop_last: bool) -> None:
        """Bind a DataLoader's per-device ``batch_size`` and ``drop_last`` to the dataset, once.

        The one way a loader's settings reach the dataset (``StreamingDataLoader`` calls it). The loader's
        ``batch_size`` fills in the dataset's when the dataset was built without one; when both are set
        they must agree. ``drop_last=True`` drops the partial last global batch of every epoch. Binding
        again with settings that come to the same is a no-op; other settings raise ``ConfigError``: build
        another dataset for a loader with other settings.
        """
        bound = self._built_config.with_loader(batch_size=batch_size, drop_last=drop_last)
        if self._loader_bound and bound != self._config:
            raise ConfigError(
                f"StreamingDataset.bind_loader: expected batch_size={self._config.batch_size}, "
                f"drop_last={self._config.drop_last} (the loader bound before), found batch_size={batch_size}, "
                f"drop_last={drop_last}; a dataset serves one loader's settings: build another StreamingDataset "
                "for this loader"
            )
        self._config = bound
        self._loader_bound = True

    @property
    def batch_size(self) -> int | None:
        """The per-device batch size (None until given: to the dataset, or by a loader's ``bind_loader``)."""
        return self._config.batch_size

    @property
    def drop_last(self) -> bool:
        """Whether every epoch drops its partial last global batch (a loader's, see ``bind_loader``)."""
        return self._config.drop_last

    @property
    def predownload(self) -> int | None:
        return self._config.predownload

    @property
    def cache_limit(self) -> int | None:
        return self._config.cache_limit

    @property
    def replication(self) -> int:
        """Consecutive ranks that read the same samples (1: none)."""
        return self._config.replication or 1

    @property
    def num_canonical_nodes(self) -> int | None:
        """The caller's ``num_canonical_nodes`` (None: a checkpoint's, else the number of nodes)."""
        return self._config.num_canonical_nodes

    @property
    def shuffle(self) -> bool:
        return self._config.shuffle

    @property
    def shuffle_algo(self) -> str:
        return self._config.shuffle_algo

    @property
    def shuffle_seed(self) -> int:
        return self._config.shuffle_seed

    @property
    def shuffle_block_size(self) -> int | None:
        return self._config.shuffle_block_size

    @property
    def batching_method(self) -> str:
        return self._config.batching_method

    @property
    def sampling_method(self) -> str:
        return self._config.sampling_method

    @property
    def sampling_granularity(self) -> int:
        return self._config.sampling_granularity

    @property
    def partition_algo(self) -> str:
        return self._config.partition_algo

    @property
    def allow_unsafe_types(self) -> bool:
        return self._config.allow_unsafe_types

    # ------------------------------------------------------------------ shape and inspection
    @property
    def epoch_size(self) -> int:
        """Samples per epoch over all devices, after up- and down-sampling (before padding)."""
        return self._planner.epoch_size

    @property
    def num_samples(self) -> int:
        return self._table.num_samples

    @property
    def stream_per_shard(self) -> np.ndarray:
        return _read_only(self._table.stream_per_shard)

    @property
    def shards_per_stream(self) -> np.ndarray:
        return _read_only(self._table.shards_per_stream)

    @property
    def samples_per_shard(self) -> np.ndarray:
        return _read_only(self._table.samples_per_shard)

    @property
    def samples_per_stream(self) -> np.ndarray:
        return _read_only(self._table.samples_per_stream)

    @property
    def shard_offset_per_stream(self) -> np.ndarray:
        return _read_only(self._table.shard_offset_per_stream)

    @property
    def spanner(self) -> Spanner:
        return Spanner(self._table)

    @property
    def shards(self) -> list[ShardEntry]:
        return list(self._opened.entries)

    @property
    def data_parallel_size(self) -> int:
        return self._config.data_parallel_size(self.world.world_size)

    @property
    def global_batch_size(self) -> int:
        return self._device_batch_size() * self.data_parallel_size

    def _device_batch_size(self) -> int:
        """The per-device batch size, 1 when none was given or bound (warned once; the setting stays None)."""
        batch_size = self._config.batch_size
        if batch_size is not None:
            return batch_size
        if not self._warned_batch_size:
            warnings.warn(
                "StreamingDataset: batch_size is None; assuming 1. Pass the per-device batch size (the "
                "DataLoader's) for deterministic resumption, or use StreamingDataLoader, which binds it",
                stacklevel=3,
            )
            self._warned_batch_size = True
        return 1

    def _canonical_nodes(self) -> int:
        # A checkpoint's value wins; else the user's; else MosaicML's default, the number of physical
        # nodes (kept in the resume state, so a resume on another node count keeps the order).
        if self._resumed_canonical_nodes is not None:
            return self._resumed_canonical_nodes
        return self.num_canonical_nodes if self.num_canonical_nodes is not None else self.world.num_nodes

    def __len__(self) -> int:
        """Samples this device yields per epoch: its share of every whole global batch, plus its share
        of a partial last one (``ceil(rest / data-parallel ranks)``, none with ``drop_last``)."""
        batch_size = self._device_batch_size()
        full, rest = self._planner.batch_counts(
            global_batch_size=self.global_batch_size, device_batch_size=batch_size
        )
        last = 0 if self.drop_last or not rest else math.ceil(rest / self.data_parallel_size)
        return full * batch_size + last

    # ------------------------------------------------------------------ statistics
    def node_stats(self) -> StatsSnapshot:
        """Shards and bytes downloaded, retries, cache hits and evictions of every process on this
        node, summed over the remote streams: egress cost is ``bytes_downloaded`` times the price."""
        total = StatsSnapshot()
        for spec in self._cache_specs:
            if spec.remote is not None:
                total = total + node_stats(spec.config.local)
        return total

    def process_stats(self) -> StatsSnapshot:
        """The same counters for this process only."""
        return self._access.stats.snapshot() if self._access is not None else StatsSnapshot()

    # ------------------------------------------------------------------ random access
    def check_cache_limit(self, num_workers: int) -> None:
        """Refuse a ``cache_limit`` too small for every reader on this node (ranks x workers)."""
        readers = self.world.local_world_size * max(1, num_workers)
        check_cache_limit(
            self._opened, self.cache_limit, readers=readers, shards_per_reader=_READERS_UNDER_LIMIT + 1
        )

    def _shard_access(self) -> ShardAccess:
        if self._access is None:
            # Open readers pin their shards against eviction: keep as many as the limit holds for every
            # reader on the node (a shuffled pass changes shard at nearly every sample).
            max_open = readers_within_limit(
                self._opened,
                readers=self.world.local_world_size * max(1, detect_worker()[1]),
                in_flight=1,
                floor=_READERS_UNDER_LIMIT,
                ceiling=_READERS_WITHOUT_LIMIT,
            )
            self._access = ShardAccess(
                self._cache_specs,
                self._opened.entries,
                self._table,
                allow_unsafe_types=self.allow_unsafe_types,
                max_open=max_open,
                stores=self._stores if self._stores_pid == os.getpid() else None,
            )
        return self._access

    def prepare_shard(self, shard_id: int) -> None:
        """Download and decompress one shard (if not cached yet)."""
        self._shard_access().prepare(shard_id)

    def get_item(self, sample_id: int) -> Any:
        """The sample with global id ``sample_id``, after ``transform``.

        Subclasses may override this to transform samples and call ``super().get_item(sample_id)``;
        during iteration that call reads the sample the loop already located.
        """
        next_read = self._next_read
        if next_read[0] == sample_id:
            sample = next_read[1](next_read[2])
        else:
            shard_ids, offsets = self._table.locate(np.array([sample_id]))
            sample = self._shard_access().reader(int(shard_ids[0])).read(int(offsets[0]))
        return sample if self.transform is None else self.transform(sample)

    def __getitem__(self, at: Any) -> Any:
        """NumPy-style access: an int (negative counts from the end), a slice, a list or an ndarray."""
        if type(at) is int and self._next_read[0] == at:  # the sample the iteration located (an overriding subclass's super())
            return self.get_item(at)
        return select_samples(at, self.num_samples, self.get_item)

    # ------------------------------------------------------------------ passes: the loader's protocol
    def begin_pass(self) -> LoaderPass:
        """Plan the next pass in the main process: a loaded resume state once, else the next epoch.

        ``StreamingDataLoader`` calls this before it starts the pass's readers (see ``handing_over``);
        the returned value says how many batches of which sizes every rank yields in it.
        """
        plan = self._cursor.begin(
            global_batch_size=self.global_batch_size, num_canonical_nodes=self._canonical_nodes()
        )
        return self._loader_pass(plan)

    @contextmanager
    def handing_over(self, plan: IterationPlan, *, replay: bool = False) -> Iterator[None]:
        """Hand the pass ``plan`` (from ``begin_pass``) to the readers started inside this block.

        The one way a pass plan reaches the processes that read it: this process's next ``iter(dataset)``
        and the DataLoader workers started inside the block (each gets a copy of the dataset, with the
        plan, when it starts). Persistent workers then advance one epoch per pass on their own or, with
        ``replay``, repeat ``plan`` at every pass (evaluation rewinds to the same epoch every pass).
        """
        self._cursor.handoff = Handoff(plan, replay)
        try:
            yield
        finally:
            self._cursor.handoff = None

    def finish_pass(self, plan: IterationPlan) -> None:
        """Every batch of the pass ``plan`` was handed to the caller: its epoch is finished.

        Call it before handing out the last batch: callers such as Composer read a pass with
        ``islice(loader, len(loader))`` and never come back for the end of the iterator.
        """
        self._cursor.end(plan)

    def _loader_pass(self, plan: IterationPlan) -> LoaderPass:
        """The counts a loader needs for ``plan``'s pass, without planning the order."""
        samples = self.samples_in_epoch(plan.epoch_batch_size)
        full, tail = self._remaining_counts(plan, samples)
        drop = self.drop_last or not tail
        size, real = (0, 0) if drop else rank_last_size(tail, self.data_parallel_size, self.world.rank // self.replication)
        return LoaderPass(
            plan=plan,
            batches=full + (0 if drop else 1),
            device_batch_size=self._device_batch_size(),
            global_batch_size=self.global_batch_size,
            samples_in_epoch=samples,
            last_batch_size=size,
            last_batch_real=real,
        )

    def _remaining_counts(self, plan: IterationPlan, samples: int) -> tuple[int, int]:
        """``(whole global batches, samples of a partial last one)`` of ``plan``'s pass, whose epoch holds
        ``samples`` (``samples_in_epoch``), without planning it."""
        check_canonical_nodes(self.epoch_size, plan.num_canonical_nodes)
        epoch_batch_size = plan.epoch_batch_size
        consumed = check_consumed_count(
            samples, -(-samples // epoch_batch_size), epoch_batch_size, plan.start
        )
        needs_rechunk(self.batching_method, epoch_batch_size, self.global_batch_size, consumed)
        return remaining_counts(samples, consumed=consumed, global_batch_size=self.global_batch_size)

    def samples_in_epoch(self, global_batch_size: int | None = None) -> int:
        """Samples an epoch ordered for ``global_batch_size`` (default: today's) holds over all ranks: the
        largest ``sample_in_epoch`` a state can hold. ``epoch_size`` for ``random`` batching; the whole
        batches only for the other methods."""
        size = self.global_batch_size if global_batch_size is None else global_batch_size
        full, rest = self._planner.batch_counts(
            global_batch_size=size, device_batch_size=self._device_batch_size()
        )
        return full * size + rest

    def _order(self, plan: IterationPlan) -> EpochOrder:
        check_canonical_nodes(self.epoch_size, plan.num_canonical_nodes)
        return self._planner.order(
            plan.epoch,
            global_batch_size=plan.epoch_batch_size,
            num_canonical_nodes=plan.num_canonical_nodes,
            device_batch_size=self._device_batch_size(),
        )

    def state_dict(self, num_samples: int = 0, from_beginning: bool = True) -> dict[str, int | str]:
        """The resume state after ``num_samples`` global samples of the current epoch (Composer's protocol).

        ``num_samples == 0`` between epochs means "the start of the next epoch": a finished epoch is
        never replayed (MosaicML Streaming 0.13 replays it after an epoch-boundary checkpoint).
        """
        position = self._cursor.position(
            num_samples,
            from_beginning,
            global_batch_size=self.global_batch_size,
            num_canonical_nodes=self._canonical_nodes(),
        )
        plan = position.plan
        # A caller that counts what the ranks received (Composer) counts rank-balance repeats too.
        consumed = min(position.consumed, self.samples_in_epoch(plan.epoch_batch_size))
        return ResumeState(
            epoch=plan.epoch,
            sample_in_epoch=consumed,
            epoch_batch_size=plan.epoch_batch_size if consumed else self.global_batch_size,
            num_canonical_nodes=plan.num_canonical_nodes,
            shuffle_seed=self.shuffle_seed,
            fingerprint=self._fingerprint,
        ).to_dict()

    def load_state_dict(self, obj: dict[str, Any] | None, *, strict: bool = True) -> None:
        """Resume from ``obj`` at the next iteration; ``None`` means start afresh (Composer passes it).

        ``strict=False`` accepts a state from a different dataset or settings (the fingerprint differs)
        and continues at its epoch and sample count in this dataset's order.
        """
        if obj is None:
            self._cursor.load(None)
            return
        obj = dict(state_mapping(obj))
        if not strict and "version" not in obj:
            obj = {
                "version": STATE_VERSION,
                "epoch_batch_size": self.global_batch_size,
                "fingerprint": self._fingerprint,
                **obj,
            }
        state = ResumeState.from_dict(obj)
        check_against_dataset(state, epoch_samples=self.epoch_size, global_batch_size=self.global_batch_size)
        if state.fingerprint != self._fingerprint and strict:
            raise StateError(
                f"resume state: expected fingerprint {self._fingerprint} (this dataset's index files and "
                f"order settings), found {state.fingerprint}; the data or a setting that shapes the order "
                "(streams, weights, epoch_size, shuffle, seed, batching or sampling method) changed since "
                "the checkpoint. Restore them, or pass strict=False to continue anyway"
            )
        if (
            self.num_canonical_nodes is not None
            and self.num_canonical_nodes != state.num_canonical_nodes
            and strict
        ):
            raise StateError(
                f"num_canonical_nodes: expected {state.num_canonical_nodes} as in the checkpoint, found "
                f"{self.num_canonical_nodes}; leave it unset (None) to take the checkpoint's value"
            )
        self._resumed_canonical_nodes = state.num_canonical_nodes
        self._cursor.load(state)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass start at the beginning of ``epoch`` (for loops that drive epochs)."""
        self._cursor.set_epoch(int(epoch))

    # ------------------------------------------------------------------ iteration
    def topology(self) -> Topology:
        worker_id, num_workers = detect_worker()
        return Topology(
            num_nodes=self.world.num_nodes,
            ranks_per_node=self.world.local_world_size,
            workers_per_rank=num_workers,
            replication=self.replication,
            rank=self.world.rank,
            worker=worker_id,
        )

    def __iter__(self) -> Iterator[Any]:
        """This (rank, worker)'s samples of the next pass. The pass is chosen when ``iter()`` is called
        (a loader's ``handing_over`` plan, else the next epoch); the samples are read lazily."""
        _, num_workers = detect_worker()
        check_batch_size_in_workers(self.batch_size, num_workers)
        settle_heap(in_worker=num_workers > 0)
        arguments = {
            "global_batch_size": self.global_batch_size,
            "num_canonical_nodes": self._canonical_nodes(),
        }
        if num_workers:
            plan = self._cursor.plan_in_worker(**arguments)
        else:
            plan = self._cursor.plan_in_main_process(**arguments)
        topology = self.topology()
        clock = self._follow_node(plan, topology)
        return self._read_pass(plan, self.sample_id_pieces(plan, topology), ends_epoch=not num_workers, clock=clock)

    def _follow_node(self, plan: IterationPlan, topology: Topology) -> NodeClock | None:
        """With ``eviction="belady"`` and a ``cache_limit``: tell the caches what this node reads in this
        pass and the next epoch (``node_forecast``); return this reader's place on the node's clock."""
        access = self._shard_access()
        if not access.follows_future:
            return None
        if self._forecaster is None:
            self._forecaster = NodeForecaster(self._planner, self._table.locate, access.num_shards)
        forecast = self._forecaster.forecast(
            plan,
            topology,
            device_batch_size=self._device_batch_size(),
            global_batch_size=self.global_batch_size,
            rows_per_epoch=-(-self.samples_in_epoch(plan.epoch_batch_size) // plan.epoch_batch_size),
            drop_last=self.drop_last,
            batching_method=self.batching_method,
        )
        if forecast is None:
            access.expect(None, reach=0)
            return None
        future, clock = forecast
        access.expect(future, reach=clock.prefetch_reach)
        return clock

    def _read_pass(
        self,
        plan: IterationPlan,
        sample_id_pieces: Iterable[np.ndarray],
        *,
        ends_epoch: bool,
        clock: NodeClock | None = None,
    ) -> Iterator[Any]:
        """Read the pass's samples, a piece of sample ids at a time: each piece is planned and located
        only when the samples before it are read, so the first sample does not wait for the pass. The
        prefetcher asks for the next piece as its window reaches the end of the current one
        (``locate_next``), so the next piece's shards download while this one is read. The samples
        come through ``chain_blocks``: no Python frame per sample between the reader and the caller."""
        return chain_blocks(self._pass_blocks(plan, sample_id_pieces, ends_epoch=ends_epoch, clock=clock))

    def _pass_blocks(
        self,
        plan: IterationPlan,
        sample_id_pieces: Iterable[np.ndarray],
        *,
        ends_epoch: bool,
        clock: NodeClock | None,
    ) -> Generator[Iterable[Any], None, None]:
        pieces = iter(sample_id_pieces)
        located: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        read = 0  # samples of the pass in the pieces before the current one

        def locate_next() -> np.ndarray | None:
            sample_ids = next(pieces, None)
            if sample_ids is None:
                return None
            shard_ids, offsets = self._table.locate(sample_ids)
            located.append((sample_ids, shard_ids, offsets))
            return shard_ids

        try:
            while located or locate_next() is not None:
                piece = located.pop(0)
                piece_clock = None if clock is None else PieceClock(clock, read)
                yield from self._piece_blocks(*piece, more=locate_next, clock=piece_clock)
                read += len(piece[0])
        finally:
            self._next_read[:] = None, None, 0
        # Only a pass that ran to its end finishes the epoch; an abandoned one (a break, a closed
        # iterator) keeps its position so that state_dict() still describes it.
        if ends_epoch:
            self._cursor.end(plan)

    def _piece_blocks(
        self,
        sample_ids: np.ndarray,
        shard_ids: np.ndarray,
        offsets: np.ndarray,
        *,
        more: Callable[[], np.ndarray | None],
        clock: PieceClock | None = None,
    ) -> Iterator[Iterable[Any]]:
        per_sample = None
        if _overrides(self, "__getitem__"):
            per_sample = PerSample(sample_ids, self.__getitem__, self._next_read)
        elif _overrides(self, "get_item"):
            per_sample = PerSample(sample_ids, self.get_item, self._next_read)
        blocks = sample_blocks(
            self._shard_access(),
            shard_ids,
            offsets,
            predownload=self.predownload,
            per_sample=per_sample,
            more=more,
            clock=clock,
        )
        transform = self.transform
        if transform is not None and per_sample is None:
            blocks = (map(transform, block) for block in blocks)
        return blocks

    def sample_ids_for(self, plan: IterationPlan, topology: Topology) -> np.ndarray:
        """The global sample ids this (rank, worker) yields in ``plan``'s pass, in order."""
        return np.concatenate([np.zeros(0, np.int64), *self.sample_id_pieces(plan, topology)])

    def sample_id_pieces(self, plan: IterationPlan, topology: Topology) -> Iterator[np.ndarray]:
        """``sample_ids_for`` in pieces, in order, each planned when asked for (the first is small)."""
        check_canonical_nodes(self.epoch_size, plan.num_canonical_nodes)
        return self._planner.rank_batch_pieces(
            plan.epoch,
            epoch_batch_size=plan.epoch_batch_size,
            num_canonical_nodes=plan.num_canonical_nodes,
            device_batch_size=self._device_batch_size(),
            consumed=plan.start,
            global_batch_size=self.global_batch_size,
            topology=topology,
            drop_last=self.drop_last,
        )


def _read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view of one of the dataset's own tables: writing to an inspection attribute must not
    change which samples the dataset reads (and some are views of the node's mapped index anyway)."""
    view = array.view()
    view.flags.writeable = False
    return view


def _overrides(dataset: StreamingDataset, name: str) -> bool:
    return getattr(type(dataset), name) is not getattr(StreamingDataset, name)


def __getattr__(name: str) -> tuple[str, ...]:
    # The accepted shuffle names, read from the registry when asked (a registered shuffle counts).
    if name == "SHUFFLE_ALGOS":
        return shuffle_choices()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

