"""The simulator reads ``start_stagger`` where the loader does: the dataset's settings (the workload's config).

Node i of N asks for its first shards i/N x ``start_stagger`` after its workers start, the loader's rule
(``cache.start_stagger.stagger_delay``); a CONFIG file's dataset and ``--start-stagger`` set it.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.paths import FIXTURES_DIR

from stream_plugin.cache.start_stagger import stagger_delay
from stream_plugin.reading.config import DatasetConfig
from stream_plugin.simulate import Hardware, Workload, simulate
from stream_plugin.simulate.config import build_run, read_options

NODES = 4


def _first_request_per_node(start_stagger: float, worker_start: float = 0.0) -> np.ndarray:
    workload = Workload.synthetic(
        shards=64,
        samples_per_shard=10,
        raw_bytes_per_shard=1 << 16,
        config=DatasetConfig(batch_size=2, start_stagger=start_stagger),
    )
    hardware = Hardware(nodes=NODES, devices_per_node=2, workers=1, latency=0.01, worker_start=worker_start, max_steps=1)
    simulation = simulate(workload, hardware)
    return np.array([simulation.request_times[simulation.request_nodes == node].min() for node in range(NODES)])


def test_the_dataset_start_stagger_spreads_the_nodes_first_shard_requests() -> None:
    staggered = _first_request_per_node(8.0)
    expected = [stagger_delay(node, NODES, 8.0) for node in range(NODES)]  # 0, 2, 4, 6 s
    assert staggered == pytest.approx(expected)
    assert _first_request_per_node(0.0) == pytest.approx([0.0] * NODES)


def test_the_stagger_counts_from_when_the_workers_ask_for_their_first_shard() -> None:
    staggered = _first_request_per_node(8.0, worker_start=0.5)
    assert staggered == pytest.approx([0.5 + stagger_delay(node, NODES, 8.0) for node in range(NODES)])


@pytest.mark.parametrize(
    ("name", "in_file", "from_file", "on_command_line", "from_command_line"),
    [("start_stagger", 3, 3.0, "500ms", 0.5), ("first_shards", 3, 3, "2", 2)],
)
def test_a_config_file_and_the_command_line_set_the_simulated_start_up_options(
    name: str, in_file: object, from_file: object, on_command_line: str, from_command_line: object
) -> None:
    """``start_stagger`` and ``first_shards`` are dataset options: a CONFIG key, or ``--start-stagger`` /
    ``--first-shards``, sets the dataset's setting, which the simulator reads (not the hardware's)."""
    dataset = {"local": str(FIXTURES_DIR / "mds-zstd"), "batch_size": 4, name: in_file}
    workload, hardware = build_run(dataset, {})
    assert getattr(workload.config, name) == from_file
    workload, _ = build_run(dataset, read_options({name: on_command_line}))
    assert getattr(workload.config, name) == from_command_line
    assert not hasattr(hardware, name)  # one source: the dataset's setting
