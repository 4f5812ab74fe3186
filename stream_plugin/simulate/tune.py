"""``--tune``: search ``predownload``, ``num_workers``, ``cache_limit`` and ``shuffle_block_size`` for the
cheapest setting that never stalls (or that reaches a target throughput).

A setting **qualifies** when no step after the first waits for data (the first step's wait is the
start-up, reported as ``time_to_first_batch``), or, with ``target_throughput``, when its mean throughput
(samples per second over the run, start-up included) reaches the target.

The search runs the real simulation for each setting, in two stages, so that it stays bounded:

1. **Throughput.** Every combination of ``predownload`` x ``num_workers`` x ``shuffle_block_size`` with
   the grid's largest cache (``None``, no limit, by default). A smaller cache only adds work (a shard
   evicted and read again is downloaded again; a download ahead of need waits for room), so a setting
   that stalls with the largest cache stalls with a smaller one too.
2. **Cost.** The ``finalists`` best qualifying settings of stage 1 again with each smaller
   ``cache_limit`` of the grid, and with the ``download_once_cache_limit`` their first run reported (the smallest
   cache that downloads no shard twice: the same egress as no limit, though it may wait for room).

**Cost** is the egress cost: bytes downloaded by every node times ``price_per_gb`` (per 10**9 bytes).
Settings are ranked qualifying first, then by egress bytes (the same order as the cost at any price,
and still meaningful at price 0), then a smaller cache, fewer workers, a smaller ``predownload`` and a
larger ``shuffle_block_size`` (a better shuffle). Settings that do not qualify follow, least waiting
first. A setting the simulation refuses (a ``cache_limit`` too small for its readers) is left out and
listed in ``TuneResult.refused``. Egress counts the steps simulated (``Hardware.max_steps`` cuts it).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

import numpy as np

from stream_plugin.errors import ConfigError
from stream_plugin.order.shuffle import default_block_size
from stream_plugin.simulate.engine import readers_floor, simulate
from stream_plugin.simulate.model import Hardware, Simulation, Workload

# Stage 1 settings that are tried again with smaller caches (stage 2).
DEFAULT_FINALISTS = 3
# Default grid: predownload as multiples of the device batch, workers per rank, cache limits as
# fractions of one node's share of the dataset, shuffle blocks as fractions of the configured block.
PREDOWNLOAD_BATCHES = (2, 8, 32)
WORKER_COUNTS = (1, 2, 4, 8)
CACHE_FRACTIONS = (1.0, 0.5, 0.25)
BLOCK_FRACTIONS = (1.0, 0.25)


@dataclass(frozen=True)
class Setting:
    """One point of the search: the four tuned options (``cache_limit`` and ``shuffle_block_size``
    ``None`` mean no limit and MosaicML's default block)."""

    predownload: int
    num_workers: int
    cache_limit: int | None
    shuffle_block_size: int | None

    def apply(self, workload: Workload, hardware: Hardware) -> tuple[Workload, Hardware]:
        """The workload and hardware with this setting (frozen values: new ones, the inputs unchanged)."""
        config = replace(
            workload.config,
            predownload=self.predownload,
            cache_limit=self.cache_limit,
            shuffle_block_size=self.shuffle_block_size,
        )
        return replace(workload, config=config), replace(hardware, workers=self.num_workers)

    def to_dict(self) -> dict[str, int | None]:
        return {
            "predownload": self.predownload,
            "num_workers": self.num_workers,
            "cache_limit": self.cache_limit,
            "shuffle_block_size": self.shuffle_block_size,
        }


@dataclass(frozen=True)
class TuneGrid:
    """The values searched for each option (``None`` in ``cache_limit``: no limit)."""

    predownload: tuple[int, ...]
    num_workers: tuple[int, ...]
    cache_limit: tuple[int | None, ...]
    shuffle_block_size: tuple[int | None, ...]

    def __post_init__(self) -> None:
        for name in ("predownload", "num_workers", "cache_limit", "shuffle_block_size"):
            values = getattr(self, name)
            if not isinstance(values, tuple) or not values:
                raise ConfigError(
                    f"TuneGrid.{name}: expected a non-empty tuple of values to try, found {values!r}; "
                    "pass at least one value (the current setting to keep it fixed)"
                )
            minimum = 0 if name == "num_workers" else 1
            for value in values:
                if value is None and name in ("cache_limit", "shuffle_block_size"):
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
                    raise ConfigError(
                        f"TuneGrid.{name}: expected ints >= {minimum}"
                        f"{' or None' if name in ('cache_limit', 'shuffle_block_size') else ''}, "
                        f"found {value!r} in {values!r}; pass whole counts"
                    )

    @classmethod
    def for_workload(cls, workload: Workload, hardware: Hardware) -> TuneGrid:
        """A small grid around the workload: ``predownload`` of 2, 8 and 32 device batches; 1, 2, 4 and
        8 workers (and the hardware's own count); no cache limit and 1, 1/2 and 1/4 of a node's share of
        the dataset, none below the smallest workable cache; the configured shuffle block and a quarter of
        it, none below a shard (the configured values are always included)."""
        config = workload.config
        batch = config.batch_size or 1
        predownloads = {batch * multiple for multiple in PREDOWNLOAD_BATCHES}
        if config.predownload is not None:
            predownloads.add(config.predownload)
        workers = set(WORKER_COUNTS) | {hardware.workers}
        share = int(workload.footprint.sum()) // hardware.nodes
        floor = node_cache_limit_floor(workload, hardware.devices_per_node, max(workers))
        caches: set[int | None] = {None, config.cache_limit}
        caches |= {max(floor, math.ceil(share * fraction)) for fraction in CACHE_FRACTIONS}
        blocks: set[int | None] = {config.shuffle_block_size}
        if config.shuffle:  # the configured block as a number (None is MosaicML's default block)
            canonical = config.num_canonical_nodes or hardware.nodes
            block = config.shuffle_block_size or default_block_size(canonical)
            shard_samples = int(np.max(workload.samples_per_shard))
            blocks = {max(shard_samples, int(block * fraction)) for fraction in BLOCK_FRACTIONS}
        return cls(
            predownload=tuple(sorted(predownloads)),
            num_workers=tuple(sorted(workers)),
            cache_limit=_sorted_none_last(caches),
            shuffle_block_size=_sorted_none_last(blocks),
        )

    def throughput_settings(self) -> Iterator[tuple[int, int, int | None]]:
        """Stage 1's combinations: (predownload, num_workers, shuffle_block_size)."""
        yield from product(self.predownload, self.num_workers, self.shuffle_block_size)

    @property
    def largest_cache(self) -> int | None:
        return None if None in self.cache_limit else max(v for v in self.cache_limit if v is not None)


def node_cache_limit_floor(workload: Workload, devices_per_node: int, workers: int) -> int:
    """The smallest ``cache_limit`` the dataset accepts for this many readers on a node (the loader's
    rule: ``engine.readers_floor``)."""
    return readers_floor(workload, Hardware(devices_per_node=devices_per_node, workers=workers))


@dataclass(frozen=True, eq=False)
class Candidate:
    """One simulated setting: whether it qualifies and what it costs."""

    setting: Setting
    simulation: Simulation
    qualifies: bool
    cost: float  # egress cost at the search's price_per_gb

    def summary(self) -> dict[str, Any]:
        sim = self.simulation
        return {
            **self.setting.to_dict(),
            "qualifies": self.qualifies,
            "cost": self.cost,
            "egress_bytes": sim.egress_bytes,
            "stalled_steps": sim.stalls_after_first_batch,
            "total_wait_s": sim.total_wait,
            "total_time_s": sim.total_time,
            "time_to_first_batch_s": sim.time_to_first_batch,
            "mean_throughput_samples_per_s": sim.mean_throughput,
            "peak_cache_bytes": int(np.max(sim.node_peak_cache)) if len(sim.node_peak_cache) else 0,
            "download_once_cache_limit_bytes": sim.download_once_cache_limit,
        }


@dataclass(frozen=True)
class TuneResult:
    """Every simulated setting, ranked (see the module docstring), and what the search was asked."""

    candidates: tuple[Candidate, ...]
    refused: tuple[tuple[Setting, str], ...]  # settings the simulation refused, with its reason
    target_throughput: float | None
    price_per_gb: float

    @property
    def best(self) -> Candidate | None:
        """The cheapest qualifying setting, or None when no setting qualifies."""
        return self.candidates[0] if self.candidates and self.candidates[0].qualifies else None

    def runners_up(self, count: int = 3) -> tuple[Candidate, ...]:
        """The next ``count`` settings after the best (qualifying or not, in rank order)."""
        start = 1 if self.best is not None else 0
        return self.candidates[start : start + count]

    def summary(self, runners_up: int = 3) -> dict[str, Any]:
        """The search's outcome as plain JSON values."""
        best = self.best
        return {
            "target_throughput": self.target_throughput,
            "price_per_gb": self.price_per_gb,
            "simulated": len(self.candidates),
            "qualifying": sum(candidate.qualifies for candidate in self.candidates),
            "best": best.summary() if best is not None else None,
            "runners_up": [candidate.summary() for candidate in self.runners_up(runners_up)],
            "refused": [{**setting.to_dict(), "reason": reason} for setting, reason in self.refused],
        }


def tune(
    workload: Workload,
    hardware: Hardware,
    *,
    target_throughput: float | None = None,
    price_per_gb: float = 0.0,
    grid: TuneGrid | None = None,
    finalists: int = DEFAULT_FINALISTS,
) -> TuneResult:
    """Search the grid (``TuneGrid.for_workload`` by default) for the cheapest setting that qualifies:
    no stalled step after the first, or a mean throughput (samples/s) of at least ``target_throughput``
    when given."""
    if target_throughput is not None and not (math.isfinite(target_throughput) and target_throughput > 0):
        raise ConfigError(
            f"target_throughput: expected samples per second > 0 or None, found {target_throughput!r}; "
            "pass the throughput the run must reach, or leave it out to ask for no stalls"
        )
    if not (math.isfinite(price_per_gb) and price_per_gb >= 0):
        raise ConfigError(
            f"price_per_gb: expected a price >= 0 per 10**9 bytes, found {price_per_gb!r}; e.g. 0.09"
        )
    if finalists < 1:
        raise ConfigError(
            f"finalists: expected 1 or more settings to try smaller caches with, found {finalists}"
        )
    grid = grid or TuneGrid.for_workload(workload, hardware)
    search = _Search(workload, hardware, target_throughput, price_per_gb)
    for predownload, workers, block in grid.throughput_settings():
        search.run(Setting(predownload, workers, grid.largest_cache, block))
    for finalist in [candidate for candidate in search.ranked() if candidate.qualifies][:finalists]:
        smaller = {cache for cache in grid.cache_limit if cache is not None and cache != grid.largest_cache}
        smaller.add(finalist.simulation.download_once_cache_limit)
        for cache in sorted(cache for cache in smaller if cache > 0):
            search.run(replace(finalist.setting, cache_limit=cache))
    return TuneResult(tuple(search.ranked()), tuple(search.refused), target_throughput, price_per_gb)


class _Search:
    """The settings simulated so far (each once), and the ones the simulation refused."""

    def __init__(
        self,
        workload: Workload,
        hardware: Hardware,
        target: float | None,
        price_per_gb: float,
    ) -> None:
        self.workload, self.hardware, self.target = workload, hardware, target
        self.price_per_gb = price_per_gb
        self.done: dict[Setting, Candidate] = {}
        self.refused: list[tuple[Setting, str]] = []

    def run(self, setting: Setting) -> None:
        if setting in self.done or any(setting == refused for refused, _ in self.refused):
            return
        try:
            simulation = simulate(*setting.apply(self.workload, self.hardware))
        except ConfigError as error:  # e.g. a cache_limit too small for this many readers
            self.refused.append((setting, str(error)))
            return
        qualifies = simulation.stalls_after_first_batch == 0 or (
            self.target is not None and simulation.mean_throughput >= self.target
        )
        self.done[setting] = Candidate(setting, simulation, qualifies, simulation.cost(self.price_per_gb))

    def ranked(self) -> list[Candidate]:
        return sorted(self.done.values(), key=_rank_key)


def _rank_key(candidate: Candidate) -> tuple[Any, ...]:
    setting, sim = candidate.setting, candidate.simulation
    cache = math.inf if setting.cache_limit is None else setting.cache_limit
    block = math.inf if setting.shuffle_block_size is None else setting.shuffle_block_size
    preference = (cache, setting.num_workers, setting.predownload, -block)
    if candidate.qualifies:
        return (0, sim.egress_bytes, *preference)
    return (1, sim.total_wait, sim.egress_bytes, *preference)


def _sorted_none_last(values: set[int | None]) -> tuple[int | None, ...]:
    return (*sorted(value for value in values if value is not None), *((None,) if None in values else ()))




# --------------------------------------------------------------------------------- the start-up storm
START_STAGGERS = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0)  # seconds over which the nodes' first downloads spread
FIRST_SHARDS = (None, 4, 2, 1)  # a node's first shards downloading at once (None: every reader's)


@dataclass(frozen=True, eq=False)
class StartUp:
    """One start-up setting simulated to the first batch."""

    start_stagger: float
    first_shards: int | None
    simulation: Simulation
    qualifies: bool  # its first batch comes within the target

    def summary(self) -> dict[str, Any]:
        sim = self.simulation
        return {
            "start_stagger_s": self.start_stagger,
            "first_shards": self.first_shards,
            "qualifies": self.qualifies,
            "time_to_first_batch_s": sim.time_to_first_batch,
            "requests": sim.requests,
            "throttled_requests": int(sim.node_throttled.sum()),
        }


def tune_start_up(
    workload: Workload,
    hardware: Hardware,
    *,
    target_first_batch: float,
    staggers: tuple[float, ...] = START_STAGGERS,
    first_shards: tuple[int | None, ...] = FIRST_SHARDS,
) -> tuple[StartUp, ...]:
    """Simulate the start (to the first batch) under each start-up lever, against the store's rate
    limit: the nodes' first downloads staggered over ``staggers`` seconds (the dataset's ``start_stagger``,
    in place of ``workload``'s), at most ``first_shards`` of a node's first shards at once (the dataset's
    ``first_shards``, likewise; the index is already fetched once per node). Returned best first: those
    whose first batch comes within ``target_first_batch`` seconds, the least change first (the smallest
    stagger, then the most first shards at once), then the others by their time to the first batch."""
    if not (math.isfinite(target_first_batch) and target_first_batch > 0):
        raise ConfigError(
            f"target_first_batch: expected seconds > 0, found {target_first_batch!r}; pass the time the "
            "first batch must come within, e.g. 60"
        )
    first_step = replace(hardware, max_steps=1)
    found = []
    for stagger, shards in product(staggers, first_shards):
        levers = replace(workload.config, start_stagger=stagger, first_shards=shards)
        simulation = simulate(replace(workload, config=levers), first_step)
        found.append(StartUp(stagger, shards, simulation, simulation.time_to_first_batch <= target_first_batch))

    def rank(candidate: StartUp) -> tuple[Any, ...]:
        most = math.inf if candidate.first_shards is None else candidate.first_shards
        if candidate.qualifies:
            return (0, candidate.start_stagger, -most, 0.0)
        return (1, candidate.simulation.time_to_first_batch, candidate.start_stagger, -most)

    return tuple(sorted(found, key=rank))


__all__ = [
    "FIRST_SHARDS",
    "START_STAGGERS",
    "Candidate",
    "Setting",
    "StartUp",
    "TuneGrid",
    "TuneResult",
    "node_cache_limit_floor",
    "tune",
    "tune_start_up",
]
