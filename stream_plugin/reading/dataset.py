"""``StreamingDataset``: a drop-in for MosaicML Streaming 0.13's, with a layout-independent order.

The dataset is a thin iterable over its plan (``dataset_plan.DatasetPlan``: the opened streams, the
sample table, the epoch planner and the fingerprint, built once by ``plan_dataset``), its settings and
a position (``cursor``). Each epoch's global order comes from the pure ``order`` maths; each
(rank, worker) reads its slice of it (``pass_reading``). Resuming recomputes the order from a few numbers
(``state_dict``), so no data is replayed. Process-local things (caches, open shards) are rebuilt in
every DataLoader worker and never pickled.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields
from functools import partial
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset

from stream_plugin.cache import StatsSnapshot, node_stats
from stream_plugin.errors import ConfigError, ConfigTypeError, StateError
from stream_plugin.order.batching import BATCHING_METHODS as BATCHING_METHODS  # the choices, for callers
from stream_plugin.order.data_parallel import DataParallelLayout
from stream_plugin.order.sampling import SAMPLING_METHODS as SAMPLING_METHODS
from stream_plugin.order.shuffle import shuffle_choices
from stream_plugin.order.topology import Topology
from stream_plugin.reading.config import DEFAULTS, DatasetConfig
from stream_plugin.reading.cursor import EpochCursor, Handoff, IterationPlan
from stream_plugin.reading.data_parallel import resolve_data_parallel
from stream_plugin.reading.dataset_compat import (
    MosaicNames,
    check_batch_size_in_workers,
    warn_small_shuffle_block,
)
from stream_plugin.reading.dataset_plan import DatasetPlan, SampleTable, StreamSamples, plan_dataset
from stream_plugin.reading.epochs import check_canonical_nodes
from stream_plugin.reading.heap import settle_heap
from stream_plugin.reading.node_forecast import NodeClock, NodeForecaster
from stream_plugin.reading.pass_reading import PassReading, read_pass
from stream_plugin.reading.passes import LoaderPass, PassCounter
from stream_plugin.reading.process_shards import check_readers_fit
from stream_plugin.reading.sample_access import select_samples
from stream_plugin.reading.second_split import refuse_second_split
from stream_plugin.reading.shard_access import ShardAccess
from stream_plugin.reading.shared_forecast import SharedSpans
from stream_plugin.reading.state import STATE_VERSION, ResumeState, check_against_dataset, state_mapping
from stream_plugin.reading.stream import DOWNLOAD_DEFAULTS, DownloadSettings, Stream
from stream_plugin.reading.stream_registry import DEFAULT_STREAM_NAME, build_streams
from stream_plugin.reading.world import World, detect_worker, detect_world

# The settings a write is refused for once the dataset is built (every option of DatasetConfig); the
# loader's can be bound once with bind_loader.
_SETTINGS = frozenset(item.name for item in fields(DatasetConfig))
_BIND = "StreamingDataLoader binds it with dataset.bind_loader(batch_size=..., drop_last=...)"
_LOADER_SETTING_FIXES = {
    "batch_size": f"pass batch_size= to the dataset when it is built, or to the loader ({_BIND})",
    "drop_last": f"pass drop_last= to the loader ({_BIND})",
}
# The arguments that are settings (DatasetConfig's, but the loader's drop_last) and download defaults.
_CONFIG_ARGUMENTS = tuple(item.name for item in fields(DatasetConfig) if item.name != "drop_last")
_DOWNLOAD_ARGUMENTS = tuple(item.name for item in fields(DownloadSettings))


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

    Three say which ranks read different samples when not every rank does (tensor, context or pipeline
    parallelism; ``docs/parallelism.md``): ``data_parallel_mesh``, a DeviceMesh of the data-parallel
    dims (``mesh["dp"]``; the other dims replicate, wherever they sit), or ``data_parallel_rank`` and
    ``data_parallel_size`` for process groups without a mesh. Every rank with one coordinate gets the
    same batches, and the global batches are those of a plain data-parallel run of that size; a resume
    state moves between layouts. ``replication`` (MosaicML's: consecutive ranks) must agree with them
    when also given. The layout is ``data_parallel`` (a ``DataParallelLayout``).

    ``throttle_deadline`` (seconds; None: ``DEFAULT_THROTTLE_DEADLINE``, 15 minutes) bounds how long one
    download waits out a store that throttles (429, S3 SlowDown) before it fails; throttling never
    counts against ``download_retry`` (``docs/storage.md``). A ``Stream`` may set its own.

    ``columns`` (Parquet streams, ``docs/parquet.md``): read only these columns, and download only
    their bytes; a ``Stream`` may set its own.

    Another is ``storage_options``, for the single-stream form (``remote=``): options of the remote's
    store (an endpoint, credentials); with ``streams=``, give each ``Stream`` its own.

    And ``eviction``, which shard leaves a full cache (``cache_limit``): ``"belady"`` (default) evicts
    the shard this node reads again farthest ahead, computed from the order by every process (no
    messages), and downloads ahead only in the order the node needs shards; ``"lru"`` evicts the least
    recently used one, as MosaicML does.

    And ``decode``, what image columns (``jpeg``, ``png``, ``pil`` and their lists) become: ``"pil"`` (default,
    MosaicML's) PIL images, ``"tensor"`` uint8 tensors of shape (C, H, W), decoded by torchvision where
    it is installed, else by Pillow (``format.image_decode``); or a dict of column -> choice. And
    ``zero_copy``: ``bytes`` columns come back as read-only memoryviews of the shard's map, not copies;
    ``True`` for every ``bytes`` column, or a list of the column names to view (each view keeps its
    shard's map alive; ``format.read_options`` and ``docs/reading.md``).

    And ``start_stagger`` (seconds, default 0): node ``i`` of ``N`` holds each process's first shard
    downloads back ``i / N x start_stagger`` seconds after the process first asks for a shard, so that a
    large job's nodes do not all hit a rate-limited store in the same second (``cache.start_stagger``;
    ``stream-plugin simulate --tune --target-first-batch`` proposes a value). The index is not delayed.
    ``first_shards`` (default None): at most this many first-shard downloads run at once on a node (all
    its ranks and workers caching into one folder share the cap); a process's downloads take a slot
    only until it has its first shard (``cache.first_shards``; the simulator proposes a value too).

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
        throttle_deadline: float | None = None,
        columns: Sequence[str] | None = None,
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
        decode: str | Mapping[str, str] = DEFAULTS.decode,
        zero_copy: bool | Sequence[str] = DEFAULTS.zero_copy,
        replication: int | None = DEFAULTS.replication,
        start_stagger: float = DEFAULTS.start_stagger,
        first_shards: int | None = DEFAULTS.first_shards,
        stream_name: str = DEFAULT_STREAM_NAME,
        stream_config: dict[str, Any] | None = None,
        world: World | None = None,
        transform: Callable[[Any], Any] | None = None,
        data_parallel_mesh: Any = None,
        data_parallel_rank: int | None = None,
        data_parallel_size: int | None = None,
    ) -> None:
        given = dict(locals())  # the arguments by name, read before any other local exists
        super().__init__()
        downloads = {name: given[name] for name in _DOWNLOAD_ARGUMENTS}
        self.streams = build_streams(
            streams,
            defaults={
                "remote": remote,
                "local": local,
                "split": split,
                "throttle_deadline": throttle_deadline,
                **downloads,
                **({"columns": columns} if columns is not None else {}),
            },
            stream_name=stream_name,
            stream_config=stream_config,
            storage_options=storage_options,
        )
        self.split = split
        # The settings in force (_config): the arguments' (_built_config), then with a loader's once bound
        # (bind_loader, the one place that replaces it).
        self._config = self._built_config = DatasetConfig.from_arguments(
            **{name: given[name] for name in _CONFIG_ARGUMENTS}
        )
        self._loader_bound = False
        self._warned_batch_size = False  # the "assuming 1" warning, once per dataset
        self.world: World = detect_world() if world is None else _checked_world(world)
        # Which ranks read different samples (a mesh, Megatron-style ints or replication): one value.
        self.data_parallel: DataParallelLayout = resolve_data_parallel(
            self.world,
            replication=replication,
            mesh=data_parallel_mesh,
            rank=data_parallel_rank,
            size=data_parallel_size,
        )
        # The dataset's shape, and this process's shard readers (each process opens its own).
        self._plan, self._shards = plan_dataset(
            self.streams,
            self._config,
            self.world,
            DownloadSettings(**{**downloads, "download_timeout": float(download_timeout)}),
            sample_table=self.sample_table,
        )
        # Position bookkeeping; workers receive a copy when the loader starts them.
        self._cursor = EpochCursor()
        self._resumed_canonical_nodes: int | None = None
        if transform is not None and not callable(transform):
            raise ConfigTypeError(
                f"transform: expected a function of one sample, or None, found {type(transform).__name__}"
            )
        self.transform = transform
        self._forecaster: NodeForecaster | None = None  # process-local; rebuilt lazily after pickling
        # [sample id, read, offset] of the sample the iteration is fetching through an overridden
        # get_item, so that super().get_item(sample_id) reads it without looking it up again.
        self._next_read: list[Any] = [None, None, 0]

    def sample_table(self, streams: StreamSamples) -> SampleTable:
        """What one sample of this dataset is: the one hook for subclasses that read other samples.

        Called once, while the dataset is built (its streams, ``world`` and settings are set; ``plan``
        is not yet). ``streams`` holds the streams' samples as their indexes list them
        (``streams.samples``: a ``ShardTable`` and the fingerprint of the data and the order settings),
        each stream's opened index (``streams.opened``) and this process's shard readers
        (``streams.readers.access()``). Return the table the order is planned over, one entry per
        sample counted in the shard it starts in, and a fingerprint that names the definition (a
        resume state taken under another one is refused). The default keeps the streams' samples;
        ``StreamingTokenBlockDataset`` returns token blocks. A subclass that defines other samples
        also reads them: it overrides ``get_item``.
        """
        return streams.samples

    @property
    def plan(self) -> DatasetPlan:
        """The dataset's shape, built once: opened streams, sample table, epoch planner, fingerprint."""
        return self._plan

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_forecaster"] = None
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
    def data_parallel_size(self) -> int:
        """Ranks that read different samples (coordinates of ``data_parallel``)."""
        return self.data_parallel.size

    @property
    def data_parallel_rank(self) -> int:
        """The data-parallel coordinate this rank reads."""
        return self.data_parallel.coordinate(self.world.rank)

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
        """Samples this device yields per epoch (``PassCounter.device_samples``)."""
        return self._passes().device_samples()

    def _passes(self) -> PassCounter:
        """The counts of this rank's passes under the settings in force."""
        return PassCounter(
            planner=self._plan.planner,
            device_batch_size=self._device_batch_size(),
            data_parallel_size=self.data_parallel_size,
            data_parallel_rank=self.data_parallel_rank,
            drop_last=self.drop_last,
            batching_method=self.batching_method,
            first_replica=self.data_parallel.replica_index(self.world.rank) in (0, None),
        )

    # ------------------------------------------------------------------ statistics
    def node_stats(self) -> StatsSnapshot:
        """Shards and bytes downloaded, retries, cache hits and evictions of every process on this
        node, summed over the remote streams: egress cost is ``bytes_downloaded`` times the price."""
        total = StatsSnapshot()
        for spec in self._plan.cache_specs:
            if spec.remote is not None:
                total = total + node_stats(spec.config.local)
        return total

    def process_stats(self) -> StatsSnapshot:
        """The same counters for this process only."""
        access = self._shards.opened_access
        return access.stats.snapshot() if access is not None else StatsSnapshot()

    # ------------------------------------------------------------------ random access
    def check_cache_limit(self, num_workers: int) -> None:
        """Refuse a ``cache_limit`` too small for every reader on this node (ranks x workers)."""
        check_readers_fit(self._plan.opened, self.cache_limit, self.world, num_workers)

    def _shard_access(self) -> ShardAccess:
        return self._shards.access()

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
            shard_ids, offsets = self._plan.table.locate(np.array([sample_id]))
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
        return self._passes().loader_pass(plan)

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

    def samples_in_epoch(self, global_batch_size: int | None = None) -> int:
        """Samples an epoch ordered for ``global_batch_size`` (default: today's) holds over all ranks
        (``PassCounter.samples_in_epoch``): the largest ``sample_in_epoch`` a state can hold."""
        return self._passes().samples_in_epoch(global_batch_size)

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
            fingerprint=self._plan.fingerprint,
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
                "fingerprint": self._plan.fingerprint,
                **obj,
            }
        state = ResumeState.from_dict(obj)
        check_against_dataset(state, epoch_samples=self.epoch_size, global_batch_size=self.global_batch_size)
        if state.fingerprint != self._plan.fingerprint and strict:
            raise StateError(
                f"resume state: expected fingerprint {self._plan.fingerprint} (this dataset's index files and "
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
        """Make the next pass start at the beginning of ``epoch`` (for loops that drive epochs).

        A loader that would split the samples over the ranks a second time (Accelerate's dispatcher or
        shard wrapper, which call this before each pass) is refused (``second_split``)."""
        refuse_second_split(sys._getframe(1), self.world.world_size)
        self._cursor.set_epoch(int(epoch))

    @property
    def next_epoch(self) -> int:
        """The epoch the next pass runs (a loaded resume state's, else the one after the last begun)."""
        return self._cursor.next_epoch

    @next_epoch.setter
    def next_epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

    # ------------------------------------------------------------------ iteration
    def topology(self) -> Topology:
        worker_id, num_workers = detect_worker()
        return Topology(
            num_nodes=self.world.num_nodes,
            ranks_per_node=self.world.local_world_size,
            workers_per_rank=num_workers,
            rank=self.world.rank,
            worker=worker_id,
            data_parallel=self.data_parallel,
        )

    def __iter__(self) -> Iterator[Any]:
        """This (rank, worker)'s samples of the next pass. The pass is chosen when ``iter()`` is called
        (a loader's ``handing_over`` plan, else the next epoch); the samples are read lazily."""
        _, num_workers = detect_worker()
        check_batch_size_in_workers(self.batch_size, num_workers)
        warn_small_shuffle_block(self.config, self.plan.table.samples_per_shard)
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
        # A pass read in this process that runs to its end finishes its epoch here; in DataLoader workers the
        # loader finishes it (finish_pass). An abandoned pass keeps its position, for state_dict().
        when_done = None if num_workers else partial(self._cursor.end, plan)
        return read_pass(self._pass_reading(), self.sample_id_pieces(plan, topology), clock=clock, when_done=when_done)

    def _follow_node(self, plan: IterationPlan, topology: Topology) -> NodeClock | None:
        """With ``eviction="belady"`` and a ``cache_limit``: tell the caches what this node reads in this
        pass and the next epoch (``node_forecast``); return this reader's place on the node's clock."""
        access = self._shard_access()
        if not access.follows_future:
            return None
        if self._forecaster is None:
            self._forecaster = self._node_forecaster(access.num_shards)
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
        access.expect(future, reach=clock.prefetch_reach, place=clock.reader_place)
        return clock

    def _node_forecaster(self, num_shards: int) -> NodeForecaster:
        """The forecaster, sharing each planned pass through the first cached stream's ``local`` folder."""
        planner, table = self._plan.planner, self._plan.table
        folders = [spec.config.local for spec in self._plan.cache_specs if spec.remote is not None]
        shared = None
        if folders:
            identity = SharedSpans.identity_of(table.samples_per_shard, planner.samples_per_stream, planner.settings)
            shared = SharedSpans(folders[0], identity)
        return NodeForecaster(planner, num_shards, shared=shared)

    def _pass_reading(self) -> PassReading:
        """What reading a pass takes from this dataset: a subclass's own ``get_item`` or ``__getitem__``
        fetches each sample when it overrides one."""
        fetch = None
        if _overrides(self, "__getitem__"):
            fetch = self.__getitem__
        elif _overrides(self, "get_item"):
            fetch = self.get_item
        return PassReading(
            self._shard_access(), self._plan.table, self.predownload, fetch, self.transform, self._next_read
        )

    def sample_id_pieces(self, plan: IterationPlan, topology: Topology) -> Iterator[np.ndarray]:
        """The global sample ids this (rank, worker) yields in ``plan``'s pass, in order, in pieces, each
        planned when asked for (the first is small)."""
        check_canonical_nodes(self.epoch_size, plan.num_canonical_nodes)
        return self._plan.planner.rank_batch_pieces(
            plan.epoch,
            epoch_batch_size=plan.epoch_batch_size,
            num_canonical_nodes=plan.num_canonical_nodes,
            device_batch_size=self._device_batch_size(),
            consumed=plan.start,
            global_batch_size=self.global_batch_size,
            topology=topology,
            drop_last=self.drop_last,
        )


def _overrides(dataset: StreamingDataset, name: str) -> bool:
    return getattr(type(dataset), name) is not getattr(StreamingDataset, name)


def __getattr__(name: str) -> tuple[str, ...]:
    # The accepted shuffle names, read from the registry when asked (a registered shuffle counts).
    if name == "SHUFFLE_ALGOS":
        return shuffle_choices()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

