"""The simulation: the real order's reads, the node caches and the store, step by step.

The model, in the order a step happens:

- **What a node needs.** ``reads.plan_reads`` gives each node the shards it reads in each epoch,
  each with its first and last step (the real order code): without a ``cache_limit`` a demand is a
  shard's span in its first pass. With one, a demand is a *visit*: a run of the node's reads of a
  shard at most ``pin_gap`` steps apart, the time its readers keep it open (pinned); between two
  visits the cache may evict it. The model's grain is the step, not the sample; within a step the
  node reads its demands in the order of its clock (``reading.node_forecast``).
- **Start.** Each node first downloads every stream's index (one GET each, through the same store and
  link); its workers start ``worker_start`` later (the fork, their first iterator), and its first
  shards are asked for then, ``start_stagger x node / nodes`` later still (the dataset's option). With
  the dataset's ``first_shards`` K, a reader's first-shard download takes one of K node slots (it
  waits, in need order, while all K are held) and gives it back when it is in; other downloads take
  no slot (``cache.first_shards``, the loader's rule).
- **Prefetch.** A node's workers download ahead of their reading. Each worker reads every
  ``workers``-th batch and builds up to ``prefetch_factor`` of its batches ahead of the trainer, but
  stops at a shard not yet in; it downloads the shards of its next ``predownload`` samples, i.e. the
  next ``max(workers, 1) x ceil(predownload / batch_size)`` steps of the node from its position. The
  window moves when the trainer takes a batch and when a shard arrives; shards enter it in order of
  first read.
- **Downloads.** Each file is one GET. Its bytes start ``latency`` after the request; the node's
  transfers in flight share its bandwidth equally (``link``). At most ``ranks x max(workers, 1) x
  download_threads`` downloads hold a thread at once, the rest wait in need order. A shard is ready
  once its files are in and decompressed (``raw_bytes / decompress_rate``, in its thread). The first
  shard of every reader downloads alone: the window opens once those are ready, as the real reader
  opens its prefetch window only after its first sample.
- **Throttling.** With ``rate_limit`` (R) the store admits requests from one token bucket for the
  whole job: it holds up to ``max(1, R)`` tokens (a second's worth), refills at R per second, and
  each admitted request takes one. A request that finds none is answered 429 after the latency. Each
  node paces its requests as the real run does, by calling the same rule (``storage.node_rate``:
  ``reserve`` a slot before each request, ``refused`` / ``answered`` after): unpaced until the first
  429, then a shared rate with additive increase and multiplicative decrease. A 429 uses no attempt; a
  download throttled past ``throttle_deadline`` is counted as failed (the real run raises there).
- **Cache.** A node keeps what it downloaded across epochs. A ``cache_limit`` below what the loader
  accepts (``readers_floor``, its own rule) is refused with its message. With a limit a download
  first makes room, and every decision is the cache's own (``cache.eviction_rules``, the functions
  its ``Evictor`` calls): whether a download may make room now and how much (``room_to_make``), which
  shard goes first (``eviction_order``) and how many go (``victims_to_free``). The engine only gathers
  their facts from its model. ``belady`` ranks shards by their next use by the cache's rule
  (``cache.future.span_next_use``) over each shard's spans, pass by pass, in the window the cache
  ranks in: from the step to ``3 x max(workers, 1)`` steps past it (the cache's ``prefetch_reach``), a
  shard read anywhere in it counting as in use (those go least recently used first; never again
  first). A download ahead of need waits while the node reads a shard it does not hold before the one
  it brings, and unless idle shards remain for a download on demand after it; it evicts only shards
  read after its own, nothing while its shard is read beyond the reach, and nothing at all unless the
  shards it may evict make the room. ``lru`` evicts the least recently used shard (the later of its
  placement and its latest read). A pinned shard is never evicted: one a reader has read in its
  current visit, or asked for on demand. A download ahead that finds no room waits for the window's
  next move; one needed now evicts the shards read earlier in its step if it must, then waits for the
  node's downloads in flight, as the cache does; it is refused only with every shard pinned and
  nothing in flight.
- **Workers and steps.** Worker ``t mod workers`` of every rank builds batch ``t``: it starts once it
  finished its previous batch and the trainer is within ``prefetch_factor`` of its batches, and takes
  ``batch_size x sample_time`` once the batch's shards are ready, then ``handover`` to reach the
  trainer. Steps are synchronous across all ranks (DDP): step ``t`` starts when every node's batch is
  built and step ``t - 1`` ended, and computes for ``step_time + batch_size x step_time_per_sample``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from stream_plugin.cache.eviction_rules import Ahead, eviction_order, room_to_make, victims_to_free
from stream_plugin.cache.future import span_next_use
from stream_plugin.errors import ConfigError
from stream_plugin.reading.process_shards import READERS_UNDER_LIMIT, READERS_WITHOUT_LIMIT
from stream_plugin.reading.shard_access import DEFAULT_PREDOWNLOAD
from stream_plugin.reading.sources import check_node_cache_limit, node_cache_limit_floor, readers_within
from stream_plugin.simulate.link import Link
from stream_plugin.simulate.model import Hardware, Simulation, Workload
from stream_plugin.simulate.reads import NodeEpoch, ReadPlan, Visits, plan_reads
from stream_plugin.storage import node_rate
from stream_plugin.storage.download_settings import DEFAULT_THROTTLE_DEADLINE
from stream_plugin.storage.node_rate import RateState

_UNKNOWN = math.inf  # the ready time of a download not yet finished
# Events: a request reaches the store (target: a download), a transfer's first byte arrives (a
# download), a node's link finishes its next transfer (target: a node; valid while its version holds).
# A node's shard is ready after its decompression: its window moves (target: a node).
_REQUEST, _FIRST_BYTE, _LINK, _WINDOW = 0, 1, 2, 3


def ahead_steps(workload: Workload, hardware: Hardware) -> int:
    """The steps of a node a worker's ``predownload`` samples cover: its next ``predownload / batch_size``
    batches, each ``workers`` steps apart."""
    predownload = workload.config.predownload or DEFAULT_PREDOWNLOAD
    return max(hardware.workers, 1) * math.ceil(predownload / int(workload.config.batch_size or 1))


def window_steps(workload: Workload, hardware: Hardware) -> int:
    """How many steps past the trainer's a node's workers download at most: ``prefetch_factor`` batches
    of every worker built ahead, then ``predownload`` samples past the last of them."""
    return hardware.prefetch_factor * max(hardware.workers, 1) + ahead_steps(workload, hardware)


def _in_use_bytes(node: _Node, footprints: np.ndarray, step: int) -> int:
    """Bytes of the shards ``node`` has in use at ``step`` (demands whose span covers it)."""
    read = np.searchsorted(node.first, step, side="right")  # demands begun by ``step``
    covering = node.last[:read] >= step
    return int(footprints[node.shard[:read][covering]].sum())


def _no_room(node: _Node, footprints: np.ndarray, step: int, limit: int | None, shard: int) -> ConfigError:
    return ConfigError(
        f"cache_limit: expected room for shard {shard} ({int(footprints[shard])} bytes) beside the shards node "
        f"{node.index} has pinned at step {step} ({_in_use_bytes(node, footprints, step)} bytes: the readers' "
        f"open shards), found {limit} bytes; raise cache_limit to at least cache_limit_floor(shard sizes, "
        "readers) for the ranks x workers of a node"
    )


def _loader_streams(workload: Workload) -> list[tuple[np.ndarray, int]]:
    """Each stream's shard bytes and total bytes, as the loader counts them for its cache checks."""
    edges = np.cumsum((0, *workload.shards_per_stream))
    return [
        (workload.stored_bytes[begin:end], int(workload.stored_bytes[begin:end].sum()))
        for begin, end in zip(edges[:-1], edges[1:], strict=True)
    ]


def readers_floor(workload: Workload, hardware: Hardware) -> int:
    """The smallest ``cache_limit`` the loader accepts on this hardware: room for what every reader of
    a node (rank x worker, replicas too) holds, by the loader's own rule
    (``reading.sources.check_node_cache_limit``)."""
    return node_cache_limit_floor(
        _loader_streams(workload),
        readers=hardware.devices_per_node * max(hardware.workers, 1),
        shards_per_reader=READERS_UNDER_LIMIT + 1,
    )


def check_readers_fit(workload: Workload, hardware: Hardware) -> None:
    """Refuse a ``cache_limit`` the loader refuses (``readers_floor``), with the loader's message."""
    check_node_cache_limit(
        workload.config.cache_limit,
        _loader_streams(workload),
        readers=hardware.devices_per_node * max(hardware.workers, 1),
        shards_per_reader=READERS_UNDER_LIMIT + 1,
    )


def pin_gap(workload: Workload, hardware: Hardware) -> int | None:
    """With a ``cache_limit``: the steps a read keeps its shard pinned past the read's own step, as the
    readers do. Each reader (rank x worker) keeps its last ``max_open`` shards open (the loader's
    ``reading.sources.readers_within``); it reads one batch every ``workers`` steps of the node, of up to
    ``batch_size`` shards, so a shard it read stays open ``workers x (max_open // batch_size)`` steps at
    least. None without a limit (nothing is evicted)."""
    limit = workload.config.cache_limit
    if limit is None:
        return None
    workers = max(hardware.workers, 1)
    readers = hardware.devices_per_node * workers  # every rank of the node reads, replicas too
    streams = _loader_streams(workload)
    total = max(sum(size for _, size in streams), 1)
    shares = [  # the dataset splits the limit over its streams by size (``reading.sources``)
        (max(1, limit * size // total), int(part.max())) for part, size in streams if len(part)
    ]
    max_open = readers_within(
        shares,
        readers=readers,
        in_flight=1,
        floor=READERS_UNDER_LIMIT,
        ceiling=READERS_WITHOUT_LIMIT,
    )
    return workers * (max_open // int(workload.config.batch_size or 1))


@dataclass
class _Download:
    node: int
    shard: int
    files_left: int
    ready: float = _UNKNOWN
    slot: float | None = None  # the node's slot this request was given (``node_rate.reserve``), once paced
    given: float = 0.0  # when it was given that slot
    throttled_since: float | None = None  # when the store first refused this request
    placed_step: int = -1  # the trainer's step when it was placed (its last use until it is read)
    index_bytes: int = 0  # for a stream's index (``shard`` -1): its bytes
    first: bool = False  # a reader's first shard: holds one of the node's ``first_shards`` slots


@dataclass(eq=False)
class _Node:
    """One node's demands (a shard's span in one pass), cache and link."""

    index: int
    shard: np.ndarray  # int64 (D,): demands in order of first read
    first: np.ndarray  # int64 (D,)
    last: np.ndarray  # int64 (D,)
    download_of: np.ndarray  # int64 (D,): the download serving each demand, -1 until released
    link: Link  # the node's bandwidth, shared by its transfers in flight
    released: int = 0  # demands [0, released) have a download (or a cached copy)
    resolved: int = 0  # demands [0, resolved) have a known ready time
    next_release: float = math.inf  # the first step of demand ``released`` (inf: none left)
    next_resolve: float = math.inf  # the first step of demand ``resolved`` once released (inf: none)
    step: int = 0  # the trainer's latest batch
    ready_upto: int = 0  # demands [0, ready_upto) are released and ready
    first_wave: int = 0  # demands downloaded before the window opens (the readers' first shards)
    opened: bool = False  # whether the prefetch window is open
    active: int = 0  # downloads holding a download thread (requested, transferring or decompressing)
    queued: deque[int] = field(default_factory=deque)  # downloads waiting for a thread, earliest first
    first_active: int = 0  # first-shard downloads holding one of the node's ``first_shards`` slots
    first_queued: deque[int] = field(default_factory=deque)  # first-shard downloads waiting for a slot
    holding: dict[int, int] = field(default_factory=dict)  # shard -> its download (placed or in flight)
    usage: int = 0
    peak: int = 0
    requests: int = 0
    throttled: int = 0
    bytes: int = 0
    downloads: int = 0
    failed: int = 0
    rate: RateState = field(default_factory=RateState)  # the node's shared request rate (storage.node_rate)
    uses_of: dict[int, np.ndarray] = field(default_factory=dict)  # shard -> its demands (with a limit)
    # shard -> (first, last) steps of its spans, pass by pass (with a limit): what the cache's
    # ``NodeFuture`` knows, by which it ranks the shards; inside a span a shard's next use is "now"
    spans_of: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # The same spans as arrays int64 (P,), and whether each shard is held (placed or in flight): bool (S,)
    span_shard: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    span_first: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    span_last: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    held: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    claimed: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # (D,): released when read (pinned)

    def __post_init__(self) -> None:
        self.next_release = self.first_of(0)

    def first_of(self, demand: int) -> float:
        """The first step of ``demand``; inf past the last."""
        return int(self.first[demand]) if demand < len(self.first) else math.inf


class _Run:
    """The event loop over every node (see the module docstring)."""

    def __init__(self, workload: Workload, hardware: Hardware, reads: ReadPlan) -> None:
        self.workload = workload
        self.hardware = hardware
        self.reads = reads
        config = workload.config
        self.batch_size = int(config.batch_size or 1)
        self.limit = config.cache_limit
        self.policy = config.eviction
        self.window = window_steps(workload, hardware)
        self.credit = hardware.prefetch_factor * max(hardware.workers, 1)  # steps workers build ahead
        self.ahead = ahead_steps(workload, hardware)
        # How far ahead a download may evict (the real ``NodeClock.prefetch_reach``: two batches of
        # every worker in flight, past the other workers' lag), in steps.
        self.reach = 3 * max(hardware.workers, 1)
        ranks = hardware.node_bands(hardware.data_parallel(config.replication))[0][1]  # coordinates per node
        self.readers = ranks * max(hardware.workers, 1)  # a node's (rank, worker) readers
        self.slots = self.readers * hardware.download_threads
        self.downloads: list[_Download] = []
        self.events: list[
            tuple[float, int, int, int, int]
        ] = []  # heap: (time, sequence, kind, target, version)
        self.sequence = 0
        self.now = 0.0  # the time of the latest event handled
        # Every request that reached the store: when, from which node, and whether it was refused.
        self.log_times: list[float] = []
        self.log_nodes: list[int] = []
        self.log_refused: list[bool] = []
        capacity = max(1.0, hardware.rate_limit or 0.0)
        self.bucket = [capacity, 0.0, capacity]  # tokens, when counted, capacity
        self.nodes = [self._node(index) for index in range(hardware.nodes)]

    # ------------------------------------------------------------------ set-up
    def _node(self, index: int) -> _Node:
        spans: list[NodeEpoch] = [epoch[index] for epoch in self.reads.epochs]
        passes: list[NodeEpoch | Visits] = list(spans)
        if self.limit is not None:  # a demand is a visit: the shard is pinned while its readers hold it
            passes = [one.visits if one.visits is not None else one for one in spans]
        shard = np.concatenate([one.shards for one in passes]) if passes else np.zeros(0, np.int64)
        first = np.concatenate([one.first for one in passes]) if passes else np.zeros(0, np.int64)
        last = np.concatenate([one.last for one in passes]) if passes else np.zeros(0, np.int64)
        if self.limit is None:  # a shard stays once downloaded: only its first pass needs it
            _, keep = np.unique(shard, return_index=True)
            keep.sort()
            shard, first, last = shard[keep], first[keep], last[keep]
        order = np.argsort(first, kind="stable")
        node = _Node(
            index,
            shard[order],
            first[order],
            last[order],
            np.full(len(order), -1, np.int64),
            Link(self.hardware.bandwidth),
        )
        if self.limit is not None:
            by_shard = np.argsort(node.shard, kind="stable")
            bounds = np.flatnonzero(np.diff(node.shard[by_shard])) + 1
            for group in np.split(by_shard, bounds):
                if len(group):
                    node.uses_of[int(node.shard[group[0]])] = group
            span_shard = np.concatenate([one.shards for one in spans])
            span_first = np.concatenate([one.first for one in spans])
            span_last = np.concatenate([one.last for one in spans])
            by_shard = np.argsort(span_shard, kind="stable")  # passes in order within each shard
            bounds = np.flatnonzero(np.diff(span_shard[by_shard])) + 1
            for group in np.split(by_shard, bounds):
                if len(group):
                    node.spans_of[int(span_shard[group[0]])] = (span_first[group], span_last[group])
            node.span_shard, node.span_first, node.span_last = span_shard, span_first, span_last
            node.held = np.zeros(self.workload.num_shards, bool)
            node.claimed = np.zeros(len(node.shard), bool)
        return node

    def missing_before(self, node: _Node, step: int, time: int) -> bool:
        """Whether ``node`` reads, before ``time`` (from ``step`` on, by ``next_use``), a shard it does not
        hold: a download ahead then waits, as the cache's rule makes it (downloads in need order)."""
        uses = span_next_use(node.span_first, node.span_last, step, step + self.reach)  # (P,)
        return bool((~node.held[node.span_shard[uses < time]]).any())

    def next_use(self, node: _Node, shard: int, step: int) -> int:
        """When ``node`` reads ``shard`` next from ``step`` on, by the cache's rule (``span_next_use``) over
        the window the cache ranks in (the reach ahead): ``step + reach`` for a shard read by then,
        ``NEVER`` when not read again."""
        return int(self._next_uses(node, np.array([shard], np.int64), step)[0])

    # ------------------------------------------------------------------ the store and the links
    def _push(self, time: float, kind: int, target: int, version: int = 0) -> None:
        heapq.heappush(self.events, (time, self.sequence, kind, target, version))
        self.sequence += 1

    def _handle(self, time: float, kind: int, target: int, version: int) -> None:
        """One event: a request reaches the store, a transfer's first byte arrives, or a link finishes
        its next transfer."""
        if kind == _REQUEST:
            self._request(time, target)
        elif kind == _WINDOW:
            self.open_window(self.nodes[target], time)
        elif kind == _FIRST_BYTE:
            item = self.downloads[target]
            node = self.nodes[item.node]
            size = (
                item.index_bytes
                if item.shard < 0
                else int(self.workload.stored_bytes[item.shard]) / int(self.workload.requests_per_shard[item.shard])
            )
            node.link.add(time, target, size)
            self._schedule_link(node)
        else:
            node = self.nodes[target]
            if version == node.link.version:
                for download in node.link.finished(time):
                    self._transferred(time, download)
                self._schedule_link(node)

    def _schedule_link(self, node: _Node) -> None:
        finish = node.link.next_finish()
        if finish is not None:
            self._push(finish, _LINK, node.index, node.link.version)

    def _request(self, time: float, download: int) -> None:
        """A request of ``download`` is ready at ``time``: it takes the node's next slot, then reaches the
        store, which admits it (its bytes start after the latency) or answers 429 after the latency;
        then it asks for a slot again."""
        hw = self.hardware
        item = self.downloads[download]
        node = self.nodes[item.node]
        if hw.rate_limit is not None:
            # A slot, as ``storage.throttle.NodeThrottle.admit`` takes one: a wait the store named while
            # the request slept for it sends it back to the line.
            if item.slot is None or node.rate.blocked_until > time:
                item.given = time
                node.rate, item.slot = node_rate.reserve(node.rate, time)
                if item.slot > time:
                    self._push(item.slot, _REQUEST, download)
                    return
            sent_at, item.slot = item.given, None
            tokens, counted, capacity = self.bucket
            tokens = min(capacity, tokens + max(0.0, time - counted) * hw.rate_limit)
            self.bucket[:2] = [tokens, max(time, counted)]
            answer = time + hw.latency
            self._log(time, node.index, tokens < 1.0)
            if tokens < 1.0:
                node.throttled += 1
                node.rate = node_rate.refused(node.rate, answer, sent_at, None)
                item.throttled_since = sent_at if item.throttled_since is None else item.throttled_since
                if answer - item.throttled_since < DEFAULT_THROTTLE_DEADLINE:
                    self._push(answer, _REQUEST, download)
                    return
                node.failed += 1  # the real run raises here; the model lets the request through
            self.bucket[0] -= 1.0
            node.rate = node_rate.answered(node.rate, answer, sent_at)
        else:
            self._log(time, node.index, False)
        item.throttled_since = None
        node.requests += 1
        self._push(time + hw.latency, _FIRST_BYTE, download)

    def _log(self, time: float, node: int, refused: bool) -> None:
        self.log_times.append(time)
        self.log_nodes.append(node)
        self.log_refused.append(refused)

    def start_index(self, node: _Node, size: int, time: float) -> int:
        """Download one stream's index (``size`` bytes) for ``node`` at ``time``: one GET, no cache room."""
        download = len(self.downloads)
        self.downloads.append(_Download(node.index, -1, 1, index_bytes=size))
        self._push(time, _REQUEST, download)
        return download

    def _transferred(self, time: float, download: int) -> None:
        """A file of ``download`` is in: request the next, or the shard is ready once decompressed."""
        item = self.downloads[download]
        node = self.nodes[item.node]
        if item.shard < 0:  # a stream's index
            item.ready = time
            node.bytes += item.index_bytes
            return
        item.files_left -= 1
        if item.files_left:
            self._push(time, _REQUEST, download)
            return
        shard = item.shard
        rate = self.hardware.decompress_rate
        if rate is not None and self.workload.raw_bytes[shard] != self.workload.stored_bytes[shard]:
            time += int(self.workload.raw_bytes[shard]) / rate
        item.ready = time
        item.placed_step = node.step
        node.bytes += int(self.workload.stored_bytes[shard])
        node.downloads += 1
        if node.queued:  # the download thread is free: it takes the earliest queued download
            self._push(time, _REQUEST, node.queued.popleft())
        else:
            node.active -= 1
        if item.first:  # its first-shard slot is free: the earliest first shard waiting takes it
            node.first_active -= 1
            if node.first_queued:
                self._admit(node, node.first_queued.popleft(), time)
        if item.ready > time:  # still decompressing: the window moves when it is done
            self._push(item.ready, _WINDOW, node.index)
        else:
            self.open_window(node, time)

    def _start(self, node: _Node, shard: int, time: float, *, first: bool = False) -> int:
        """Start downloading ``shard`` for ``node`` at ``time``, or queue it while every download
        thread of the node is busy (or, for a reader's ``first`` shard, while every first-shard slot is)."""
        download = len(self.downloads)
        self.downloads.append(
            _Download(node.index, shard, int(self.workload.requests_per_shard[shard]), first=first)
        )
        cap = self.workload.config.first_shards
        if first and cap is not None and node.first_active >= cap:
            node.first_queued.append(download)
        else:
            self._admit(node, download, time)
        node.holding[shard] = download
        if len(node.held):
            node.held[shard] = True
        footprint = int(self.workload.footprint[shard])
        node.usage += footprint
        node.peak = max(node.peak, node.usage)
        return download

    def _admit(self, node: _Node, download: int, time: float) -> None:
        """``download`` (holding a first-shard slot, if it is a first shard) takes a download thread of
        ``node`` at ``time``, or waits for one."""
        if self.downloads[download].first:
            node.first_active += 1
        if node.active < self.slots:
            node.active += 1
            self._push(time, _REQUEST, download)
        else:
            node.queued.append(download)

    def settle(self, until: float) -> None:
        """Handle every event before ``until``."""
        while self.events and self.events[0][0] <= until:
            self._handle(*self._pop())

    def _pop(self) -> tuple[float, int, int, int]:
        time, _, kind, target, version = heapq.heappop(self.events)
        self.now = max(self.now, time)
        return time, kind, target, version

    def ready_time(self, download: int) -> float:
        """When ``download`` is ready: events are handled, in time order, until it is."""
        item = self.downloads[download]
        while item.ready == _UNKNOWN:
            if not self.events:
                raise ConfigError("simulate: a download never finished; this is a bug of the model")
            self._handle(*self._pop())
        return item.ready

    def settle_node(self, node: _Node, step: int, time: float) -> float:
        """Answer requests, in time order, until every demand of ``node`` read by ``step`` is ready;
        return when the last of them is. A demand the window could not release, or whose shard was
        evicted after its release, is downloaded now (at ``time``, or once room is made: see
        ``_room_now``)."""
        ready = 0.0
        while node.resolved < len(node.first) and node.first[node.resolved] <= step:
            demand = node.resolved
            shard = int(node.shard[demand])
            if demand == node.released or node.download_of[demand] < 0:
                # Needed now: not released ahead, or its shard evicted since (perhaps held again since)
                held = node.holding.get(shard)
                node.download_of[demand] = (
                    held if held is not None else self._start(node, shard, self._room_now(node, shard, step, time))
                )
                if len(node.claimed):
                    node.claimed[demand] = True
                if demand == node.released:
                    node.released += 1
                    node.next_release = node.first_of(node.released)
            ready = max(ready, self.ready_time(int(node.download_of[demand])))
            node.resolved += 1
        node.next_resolve = node.first_of(node.resolved) if node.resolved < node.released else math.inf
        return ready

    def _room_now(self, node: _Node, shard: int, step: int, time: float) -> float:
        """Make room for ``shard``, read at ``step``: evict idle shards, then shards whose readers are
        done with them (read earlier in this step; a reader closes a shard to open its next), then wait
        for the node's downloads in flight, as the cache waits for them; return when the download may
        start. Refused only when every shard of the node is pinned and nothing is in flight."""
        if self.limit is None:
            return time
        while not (
            self._make_room(node, shard, step, step, time, node.resolved)
            or self._make_room(node, shard, step, step, time, node.resolved, loose=True)
        ):
            in_flight = [d for d in node.holding.values() if self.downloads[d].ready > time]
            if not in_flight:
                raise _no_room(node, self.workload.footprint, step, self.limit, shard)
            while all(self.downloads[d].ready > self.now for d in in_flight):
                if not self.events:
                    raise ConfigError("simulate: a download never finished; this is a bug of the model")
                self._handle(*self._pop())
            time = max(time, min(self.downloads[d].ready for d in in_flight))
        return time

    # ------------------------------------------------------------------ the prefetch window
    def open_window(self, node: _Node, time: float) -> None:
        """Move ``node``'s prefetch window to where its workers read at ``time``: each worker runs up to
        ``prefetch_factor`` of its batches ahead of the trainer but stops at a shard not yet in, and
        downloads ``predownload`` samples past its position (``ahead`` steps of the node)."""
        while node.ready_upto < node.released:
            download = int(node.download_of[node.ready_upto])
            if download < 0 or self.downloads[download].ready > time:
                break
            node.ready_upto += 1
        if not node.opened:
            if node.ready_upto < node.first_wave:
                return
            node.opened = True
        # A worker that built every batch it may waits at the end of the last: its window reaches
        # ``ahead`` steps past it. One waiting for a shard waits at that shard's first read: its
        # window covers ``ahead`` steps from there, that one's included.
        blocked = node.first_of(node.ready_upto)
        if blocked == math.inf:
            return
        through = min(node.step + self.credit + self.ahead, int(blocked) + self.ahead - 1)
        if node.next_release <= through:
            self.release(node, through, node.step, time)

    # ------------------------------------------------------------------ the cache
    def release(
        self, node: _Node, through: int, step: int, time: float, upto: int | None = None, *, first: bool = False
    ) -> None:
        """Give the demands of ``node`` first read by step ``through`` (and below index ``upto``) a
        download (or the cached copy), in order, at ``time``; stop at one that finds no room. ``first``:
        they are the readers' first shards (``first_shards``)."""
        end = len(node.shard) if upto is None else min(upto, len(node.shard))
        while node.released < end and node.first[node.released] <= through:
            demand = node.released
            shard = int(node.shard[demand])
            held = node.holding.get(shard)
            if held is None:
                needed_at = int(node.first[demand])
                # Needed now: the node's readers have read the demands before it, in order.
                read_upto = demand if needed_at <= step else node.resolved
                if self.limit is not None and not self._make_room(node, shard, needed_at, step, time, read_upto):
                    return
                held = self._start(node, shard, time, first=first)
            node.download_of[demand] = held
            if len(node.claimed) and node.first[demand] <= step:
                node.claimed[demand] = True  # needed now: its reader holds it from here on
            node.released += 1
            node.next_release = node.first_of(node.released)
            if node.resolved == demand:
                node.next_resolve = node.first_of(demand)

    def _make_room(
        self,
        node: _Node,
        shard: int,
        needed_at: int,
        step: int,
        time: float,
        read_upto: int,
        loose: bool = False,
    ) -> bool:
        """Evict idle shards until ``shard`` fits under the limit; False where it must wait. As the
        cache does: a download ahead under Belady evicts nothing while its shard is read beyond the
        reach, and nothing at all unless the shards it may evict make the room. The evicted shards'
        released demands not yet read download them again when read. With ``loose`` (a shard needed now
        that finds no room otherwise), shards read earlier in this visit may go too (``_candidates``)."""
        assert self.limit is not None
        need = int(self.workload.footprint[shard])
        if need > self.limit:
            raise ConfigError(
                f"cache_limit: expected at least one shard's {need} bytes, found {self.limit}; raise cache_limit"
            )
        found: list[tuple[np.ndarray, np.ndarray]] = []  # the unpinned placed shards, found once

        def unpinned() -> tuple[np.ndarray, np.ndarray]:
            if not found:
                found.append(self._candidates(node, step, time, read_upto, loose))
            return found[0]

        # A download ahead keeps the shards read before its own, as the cache's NodeFuture ranks them.
        ahead = None
        keep_before = self.next_use(node, shard, step) if needed_at > step and self.policy == "belady" else None
        if keep_before is not None:
            ahead = Ahead(
                keep_before,
                within_reach=keep_before - step <= self.reach,
                missing_before=lambda: self.missing_before(node, step, keep_before),
                idle_at_least=lambda wanted: int(self.workload.footprint[unpinned()[0]].sum()) >= wanted,
            )
        excess = room_to_make(need, node.usage, self.limit, ahead)
        if excess is None:
            return False  # a download ahead waits (the cache's rule)
        if excess <= 0:
            return True
        candidates, next_uses = unpinned()
        victims = candidates[eviction_order(self.policy, len(candidates), next_uses, keep_before)].tolist()
        sizes = [int(self.workload.footprint[victim]) for victim in victims]
        count = victims_to_free(excess, sizes, all_or_nothing=ahead is not None)
        for victim, size in zip(victims[:count], sizes[:count], strict=True):
            del node.holding[victim]
            node.held[victim] = False
            uses = node.uses_of[victim]
            awaiting = uses[(uses >= node.resolved) & (uses < node.released)]
            node.download_of[awaiting] = -1
            node.usage -= size
            excess -= size
        return excess <= 0

    def _candidates(
        self, node: _Node, step: int, time: float, read_upto: int, loose: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """The placed shards no reader pins, least recently used first, and their next uses (int64 (k,)
        each): what the cache's rule (``eviction_order``) orders, by the next uses the cache's
        ``NodeFuture`` gives (``next_use``) and the latest read for least recently used.

        A shard in flight is not a candidate, nor one a reader pins: a visit covering ``step`` read
        before demand ``read_upto`` (its reader keeps it open to the visit's end; the node's demands
        are read in order), or one a reader asked for on demand (it holds the shard from the download
        on). A visit not yet read pins nothing, as in the cache: a download ahead waits to be read
        unpinned. With ``loose``, only the second kind pins."""
        placed = [(held, self.downloads[download]) for held, download in node.holding.items()]
        placed = [(held, item) for held, item in placed if item.ready <= time]  # not in flight
        if not placed:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        shards = np.array([held for held, _ in placed], np.int64)  # (c,), in the holding's order
        placed_step = np.array([item.placed_step for _, item in placed], np.int64)  # (c,)
        groups = [node.uses_of[held] for held, _ in placed]
        uses = np.concatenate(groups)  # (u,): each candidate's demands, in demand order
        owner = np.repeat(np.arange(len(placed)), [len(group) for group in groups])  # (u,)
        covering = (node.first[uses] <= step) & (node.last[uses] >= step)  # (u,)
        pins = covering & (uses >= node.resolved) & node.claimed[uses]  # asked for on demand
        if not loose:
            pins |= covering & (uses < read_upto)  # read in its current visit
        free = np.bincount(owner[pins], minlength=len(placed)) == 0  # (c,)
        # As the cache's LRU clock: the later of its placement and its latest read (the step, then the
        # read's place in the node's order).
        read = uses < node.resolved
        latest = np.full(len(placed), -1, np.int64)
        np.maximum.at(latest, owner[read], uses[read])
        was_read = latest >= 0
        read_step = np.where(was_read, np.minimum(node.last[latest], step), -1)
        later_placed = placed_step > read_step
        age = (np.where(later_placed, placed_step, read_step), np.where(later_placed | ~was_read, -1, latest))
        lru = np.lexsort((age[1][free], age[0][free]))  # least recently used first, stable
        candidates = shards[free][lru]  # (k,)
        return candidates, self._next_uses(node, candidates, step)

    def _next_uses(self, node: _Node, shards: np.ndarray, step: int) -> np.ndarray:
        """``next_use`` of each of ``shards`` (int64 (k,)) at once: the cache's rule over all their spans."""
        if not len(shards):
            return np.zeros(0, np.int64)
        spans = [node.spans_of[int(shard)] for shard in shards]
        first = np.concatenate([span[0] for span in spans])
        last = np.concatenate([span[1] for span in spans])
        starts = np.cumsum([0] + [len(span[0]) for span in spans[:-1]])
        return np.minimum.reduceat(span_next_use(first, last, step, step + self.reach), starts)


def simulate(workload: Workload, hardware: Hardware) -> Simulation:
    """Simulate the run of ``workload`` on ``hardware`` (see the module docstring for the model)."""
    check_readers_fit(workload, hardware)
    reads = plan_reads(workload, hardware, pin_gap(workload, hardware))
    run = _Run(workload, hardware, reads)
    steps = len(reads.samples_per_step)
    workers = max(hardware.workers, 1)
    batch_size = run.batch_size
    build = batch_size * hardware.sample_time + hardware.handover  # read, then handed to the trainer
    compute = hardware.step_time + batch_size * hardware.step_time_per_sample
    credit = run.credit
    worker_free = np.zeros((hardware.nodes, workers))  # when each node's worker w finishes its batch
    start = np.zeros(steps)
    end = np.zeros(steps)
    wait = np.zeros(steps)
    nodes = run.nodes
    # Each node downloads every stream's index first (one GET each, by one of its processes).
    indexes = [
        [run.start_index(node, size, 0.0) for size in workload.stream_index_bytes if size] for node in nodes
    ]
    # The index is read when the dataset is built; then the loader's workers start (fork, their first
    # iterator) and ask for their first shards.
    # ``start_stagger`` spreads the nodes' starts.
    opens = hardware.worker_start + np.array(
        [max((run.ready_time(index) for index in mine), default=0.0) for mine in indexes]
    )
    opens += workload.config.start_stagger * np.arange(hardware.nodes) / hardware.nodes
    for node in nodes:  # the first shards of the readers, alone: the window opens once they are in
        node.first_wave = min(int(np.searchsorted(node.first, 0, side="right")), run.readers)
        run.release(node, 0, 0, float(opens[node.index]), upto=node.first_wave, first=True)
        run.open_window(node, float(opens[node.index]))
    previous_end = 0.0
    data_ready = np.zeros(hardware.nodes)
    for step in range(steps):
        data_ready[:] = 0.0
        for node in nodes:  # first every node's requests for what the window could not fetch ahead
            if node.next_release <= step:
                run.release(node, step, step, max(previous_end, float(opens[node.index])))
        for node in nodes:  # then the store answers them all, in time order (the rest needs room made)
            if min(node.next_resolve, node.next_release) <= step:
                data_ready[node.index] = run.settle_node(node, step, max(previous_end, float(opens[node.index])))
        begin = worker_free[:, step % workers]
        if step >= credit:
            begin = np.maximum(begin, start[step - credit])
        built = np.maximum(begin, data_ready) + build  # (N,)
        worker_free[:, step % workers] = built
        start[step] = max(previous_end, float(built.max()))
        wait[step] = start[step] - previous_end
        end[step] = previous_end = start[step] + compute
        run.settle(start[step])
        for node in nodes:  # the trainer takes batch ``step``: every worker may read further
            node.step = step
            run.open_window(node, start[step])
    notes = list(reads.notes)
    failed = sum(node.failed for node in run.nodes)
    if failed:
        notes.append(
            f"{failed} request(s) were throttled for throttle_deadline ({DEFAULT_THROTTLE_DEADLINE:g}s): the real "
            "run raises there; lower the request rate or raise throttle_deadline"
        )
    if workload.config.cache_limit is not None:
        notes.append(
            f"cache: a read pins its shard for {(pin_gap(workload, hardware) or 0) + 1} step(s) (its reader keeps it "
            "open); between reads the cache may evict it (step grain)"
        )
    return Simulation(
        workload=workload,
        hardware=hardware,
        step_start=start,
        step_end=end,
        wait=wait,
        epoch_of_step=reads.epoch_of_step,
        samples_per_step=reads.samples_per_step,
        node_requests=np.array([node.requests for node in run.nodes], np.int64),
        node_throttled=np.array([node.throttled for node in run.nodes], np.int64),
        node_bytes=np.array([node.bytes for node in run.nodes], np.int64),
        node_downloads=np.array([node.downloads for node in run.nodes], np.int64),
        node_peak_cache=np.array([node.peak for node in run.nodes], np.int64),
        download_once_cache_limit=max(
            download_once_cache_limit(workload, reads, run.window), readers_floor(workload, hardware)
        ),
        shuffle=reads.shuffle,
        notes=tuple(notes),
        request_times=np.array(run.log_times, np.float64),
        request_nodes=np.array(run.log_nodes, np.int64),
        request_refused=np.array(run.log_refused, bool),
    )


def download_once_cache_limit(workload: Workload, reads: ReadPlan, window: int) -> int:
    """The smallest ``cache_limit`` under which no node downloads a shard twice: the most bytes a node
    must hold at once, each shard from its release (``window`` steps before its first read) to its
    last read of the run."""
    steps = len(reads.samples_per_step)
    peak = 0
    for node in range(len(reads.epochs[0]) if reads.epochs else 0):
        shard = np.concatenate([epoch[node].shards for epoch in reads.epochs])
        first = np.concatenate([epoch[node].first for epoch in reads.epochs])
        last = np.concatenate([epoch[node].last for epoch in reads.epochs])
        if not len(shard):
            continue
        order = np.argsort(shard, kind="stable")
        shard, first, last = shard[order], first[order], last[order]
        starts = np.flatnonzero(np.r_[True, np.diff(shard) != 0])  # each shard's first entry
        held_from = np.maximum(np.minimum.reduceat(first, starts) - window, 0)
        held_to = np.maximum.reduceat(last, starts)
        size = workload.footprint[shard[starts]].astype(np.int64)
        change = np.zeros(steps + 1, np.int64)
        np.add.at(change, held_from, size)
        np.add.at(change, held_to + 1, -size)
        peak = max(peak, int(np.cumsum(change).max()))
    return peak


__all__ = ["ahead_steps", "download_once_cache_limit", "pin_gap", "simulate", "window_steps"]
