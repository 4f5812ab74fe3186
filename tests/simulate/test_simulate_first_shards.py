"""The simulator reads ``first_shards`` where the loader does (the workload's config) and follows its rule.

A reader's first-shard download takes one of the node's K slots and gives it back when it is in; other
downloads take none (``cache.first_shards``). A CONFIG file's dataset and ``--first-shards`` set it.
"""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.reading.config import DatasetConfig
from stream_plugin.simulate import Hardware, Simulation, Workload, simulate

LATENCY = 1.0  # seconds from a request to its first byte: a shard's download takes about this long
READERS = 4  # one node: 4 ranks x 1 worker, each with its own first shard


def _simulate(first_shards: int | None, max_steps: int = 1) -> Simulation:
    workload = Workload.synthetic(
        shards=64,
        samples_per_shard=2,
        raw_bytes_per_shard=1 << 10,
        config=DatasetConfig(batch_size=2, first_shards=first_shards),
    )
    hardware = Hardware(nodes=1, devices_per_node=READERS, workers=1, latency=LATENCY, max_steps=max_steps)
    return simulate(workload, hardware)


def _shard_request_times(simulation: Simulation) -> np.ndarray:
    return np.sort(simulation.request_times)  # a synthetic workload has no index to fetch first


def test_the_first_shard_requests_go_out_k_at_a_time() -> None:
    capped = _shard_request_times(_simulate(first_shards=2))[:READERS]
    # Two first shards at once: the next two wait for a slot, one download (latency) later.
    assert capped == pytest.approx([0.0, 0.0, LATENCY, LATENCY], abs=1e-3)


def test_without_a_cap_every_reader_asks_for_its_first_shard_at_once() -> None:
    assert _shard_request_times(_simulate(first_shards=None))[:READERS] == pytest.approx([0.0] * READERS)


def test_downloads_after_the_first_shards_take_no_slot() -> None:
    capped = _shard_request_times(_simulate(first_shards=1, max_steps=3))
    assert capped[:READERS] == pytest.approx(np.arange(READERS) * LATENCY, abs=1e-3)  # one at a time
    later = capped[READERS:]  # asked for once the first shards are in: the prefetch window's downloads
    assert len(later) > 1 and np.all(later == later[0])  # all at once: they take no slot
