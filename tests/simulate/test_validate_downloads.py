"""The simulator's downloads against a real run: 2 nodes x 2 ranks x 2 workers, 2 epochs, GETs counted.

The real run: four rank processes (an env-var world, two to a node, each node with its own cache folder)
read 64 shards of 16 samples through a loopback HTTP server that counts each node's GETs (shards and index.json) and
bytes (``support.throttle_proxy``), meeting at a barrier after every batch as data parallelism does.
The prediction: ``simulate`` of the same dataset (its index) and settings.

Settings: device batch 4, ``shuffle=True`` with ``shuffle_algo="py1e"`` (the default) and
``shuffle_block_size=32`` (two shards' samples), so that a shard's reads in an epoch are close together
(the simulator counts a shard in use from its first to its last read of a pass, at step grain). With a
``cache_limit``, both ``predownload=8`` (two batches) and the default (512 samples: the whole run's
window): until engine 443e161 the second predicted 59/58 GETs against the 48/48 measured, as the engine
pinned every shard its window had released.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from support.sim_runs import run_real, workload_of, write_dataset
from support.throttle_proxy import ThrottleServer

from stream_plugin.reading.config import DatasetConfig
from stream_plugin.simulate import Hardware, Simulation, simulate

NODES, RANKS, WORKERS, EPOCHS = 2, 2, 2, 2
SHARDS, PER_SHARD, DEVICE_BATCH = 64, 16, 4
SHUFFLE = {"shuffle": True, "shuffle_algo": "py1e", "shuffle_block_size": 2 * PER_SHARD}
KINDS = ("shard", "index")  # what a node downloads: the simulation counts the index.json each node fetches


@dataclass(frozen=True)
class Compared:
    gets: np.ndarray  # int64 (N,): GETs each node made (shards and index.json)
    bytes: np.ndarray  # int64 (N,): bytes each node downloaded (shards and index.json)
    predicted: Simulation


@dataclass
class Rig:
    server: ThrottleServer
    folder: Path
    root: Path

    def compare(self, name: str, **settings: int | None) -> Compared:
        """Run the job for real with ``settings`` (dataset arguments), and simulate it."""
        self.server.reset_counts()
        run_real(
            self.server,
            self.root / name,
            nodes=NODES,
            ranks_per_node=RANKS,
            workers=WORKERS,
            device_batch=DEVICE_BATCH,
            epochs=EPOCHS,
            dataset={**SHUFFLE, **settings},
        )
        groups = [f"node{node}" for node in range(NODES)]
        config = DatasetConfig(batch_size=DEVICE_BATCH, **SHUFFLE, **settings)  # type: ignore[arg-type]
        hardware = Hardware(nodes=NODES, devices_per_node=RANKS, workers=WORKERS, epochs=EPOCHS)
        compared = Compared(
            gets=np.array([sum(self.server.count("gets", group, kind) for kind in KINDS) for group in groups]),
            bytes=np.array([sum(self.server.count("bytes", group, kind) for kind in KINDS) for group in groups]),
            predicted=simulate(workload_of(self.folder, config), hardware),
        )
        print(
            f"{name}: GETs {compared.gets} predicted {compared.predicted.node_requests}; "
            f"bytes {compared.bytes} predicted {compared.predicted.node_bytes}"
        )
        return compared

    def half_a_share(self) -> int:
        """Half of the bytes of the shards one node reads: the dataset's shard bytes over the nodes, halved."""
        workload = workload_of(self.folder, DatasetConfig(batch_size=DEVICE_BATCH))
        return int(workload.footprint.sum()) // NODES // 2


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    root = tmp_path_factory.mktemp("downloads")
    folder = write_dataset(
        root / "data" / "ds", samples=SHARDS * PER_SHARD, per_shard=PER_SHARD, payload=1000
    )
    workload = workload_of(folder, DatasetConfig(batch_size=DEVICE_BATCH))
    assert workload.num_shards == SHARDS and set(workload.samples_per_shard) == {PER_SHARD}
    with ThrottleServer(root / "data") as server:
        yield Rig(server, folder, root)


def test_without_a_cache_limit_each_nodes_gets_and_bytes_equal_the_simulation(rig: Rig) -> None:
    run = rig.compare("unlimited")
    assert run.gets.tolist() == run.predicted.node_requests.tolist()
    assert run.bytes.tolist() == run.predicted.node_bytes.tolist()
    assert run.gets.min() > 0
    # The index is part of it: each node fetches its index.json once, as the simulation counts it.
    index = (rig.folder / "index.json").stat().st_size
    assert [rig.server.count("gets", f"node{node}", "index") for node in range(NODES)] == [1] * NODES
    assert [rig.server.count("bytes", f"node{node}", "index") for node in range(NODES)] == [index] * NODES
    assert run.predicted.summary()["index_bytes_per_node"] == index


@pytest.mark.parametrize("predownload", [8, None], ids=["predownload-8", "predownload-default"])
def test_with_half_a_share_as_cache_limit_each_nodes_gets_and_bytes_are_within_5_percent(
    rig: Rig, predownload: int | None
) -> None:
    run = rig.compare(f"half-{predownload}", cache_limit=rig.half_a_share(), predownload=predownload)
    predicted = run.predicted
    assert np.all(np.abs(run.gets - predicted.node_requests) <= 0.05 * predicted.node_requests), run
    assert np.all(np.abs(run.bytes - predicted.node_bytes) <= 0.05 * predicted.node_bytes), run
    assert np.all(predicted.node_requests > SHARDS // NODES), "the limit must make a node download again"
