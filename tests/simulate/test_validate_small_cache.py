"""A cache too small for the shards a wide shuffle keeps in use: simulated, and held against a real run.

Issue 39's case, as a user tried it: 2 nodes x 2 ranks x 2 workers, 48 shards of 16 samples, the
default shuffle (``py1e`` with its default block: every shard is read all through the epoch), half a
node's share as ``cache_limit``, 2 epochs. The loader runs it; the simulator refused it while it counted
a shard in use from its first to its last read of a pass. It now counts the readers' pins (a shard is
pinned while a reader holds it: ``engine.pin_gap``), and ranks shards for eviction as the cache's
``NodeFuture`` does (inside a span a shard's next use is "now": least recently used first).

The real run (``support.sim_runs.run_real``, ranks as processes, a loopback server counting each node's
GETs) re-downloads most shards several times an epoch. Since the simulator calls the cache's own
eviction rules (``cache/eviction_rules.py``, with the two small-cache rules it lacked before) it predicts
801 GETs (418 and 383, each node's index.json included); four real runs on the 2-core build machine made
816, 800, 782 and 802 (0.1% to 2.4% off; node 1 once 413 against 383). The test holds the job's total
within the issue's 5% and each node within 10%. (Before, the prediction was 786 against seven runs of
746 to 782, 0.3% to 4.8% off, and the test allowed 8%.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.sim_runs import run_real, workload_of, write_dataset
from support.throttle_proxy import ThrottleServer

from stream_plugin.reading.config import DatasetConfig
from stream_plugin.simulate import Hardware, Simulation, simulate

NODES, RANKS, WORKERS, EPOCHS = 2, 2, 2, 2
SHARDS, PER_SHARD, DEVICE_BATCH = 48, 16, 4


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("small-cache")
    return write_dataset(root / "data" / "ds", samples=SHARDS * PER_SHARD, per_shard=PER_SHARD, payload=1000)


def half_a_share(folder: Path) -> int:
    return int(workload_of(folder, DatasetConfig(batch_size=DEVICE_BATCH)).footprint.sum()) // NODES // 2


def predicted(folder: Path) -> Simulation:
    config = DatasetConfig(batch_size=DEVICE_BATCH, shuffle=True, cache_limit=half_a_share(folder))
    hardware = Hardware(nodes=NODES, devices_per_node=RANKS, workers=WORKERS, epochs=EPOCHS)
    return simulate(workload_of(folder, config), hardware)


def test_a_cache_below_the_shards_a_wide_shuffle_keeps_in_use_is_simulated(dataset: Path) -> None:
    simulation = predicted(dataset)
    # Every shard is read by both nodes in both epochs, and half of a node's share does not hold them.
    assert np.all(simulation.node_requests > 2 * SHARDS)
    assert np.all(simulation.node_peak_cache <= half_a_share(dataset))
    assert (simulation.node_requests - simulation.node_downloads).tolist() == [1] * NODES  # and its index


def test_with_a_wide_shuffle_and_half_a_share_the_real_gets_agree_with_the_simulation(
    dataset: Path, tmp_path: Path
) -> None:
    simulation = predicted(dataset)
    with ThrottleServer(dataset.parent) as server:
        run_real(
            server,
            tmp_path / "cache",
            nodes=NODES,
            ranks_per_node=RANKS,
            workers=WORKERS,
            device_batch=DEVICE_BATCH,
            epochs=EPOCHS,
            dataset={"shuffle": True, "cache_limit": half_a_share(dataset)},
        )
        gets = np.array(
            [sum(server.count("gets", f"node{node}", kind) for kind in ("shard", "index")) for node in range(NODES)]
        )
    print(f"GETs {gets.tolist()} predicted {simulation.node_requests.tolist()}")
    assert abs(int(gets.sum()) - simulation.requests) <= 0.05 * simulation.requests
    assert np.all(np.abs(gets - simulation.node_requests) <= 0.10 * simulation.node_requests)
