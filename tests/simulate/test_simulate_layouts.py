"""``stream-plugin simulate`` under parallelism layouts: a mesh or a data-parallel size in the CONFIG."""

from __future__ import annotations

import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.simulate.config import build_run
from stream_plugin.simulate.engine import simulate

SYNTHETIC = {"synthetic": {"shards": 64, "samples_per_shard": 32, "raw_bytes_per_shard": 1 << 16}}


def run(**options: object) -> object:
    workload, hardware = build_run(SYNTHETIC, {"nodes": 2, "devices_per_node": 4, "workers": 0, "global_batch_size": 16, **options})
    return simulate(workload, hardware)


def test_replicas_on_a_node_download_what_one_data_parallel_rank_of_it_would() -> None:
    """(dp=4, tp=2) on 2 nodes of 4: each node reads 2 coordinates, as a plain run of 4 ranks on 2 nodes."""
    meshed = run(mesh=(("dp", 4), ("tp", 2)))
    plain = build_run(SYNTHETIC, {"nodes": 2, "devices_per_node": 2, "workers": 0, "global_batch_size": 16})
    reference = simulate(*plain)
    assert meshed.node_downloads.tolist() == reference.node_downloads.tolist()  # type: ignore[attr-defined]
    assert meshed.node_bytes.tolist() == reference.node_bytes.tolist()  # type: ignore[attr-defined]


def test_a_data_parallel_size_is_replication_over_consecutive_ranks() -> None:
    by_size = run(data_parallel_size=4)
    by_mesh = run(mesh=(("dp", 4), ("tp", 2)))
    assert by_size.node_downloads.tolist() == by_mesh.node_downloads.tolist()  # type: ignore[attr-defined]


def test_pipeline_stages_on_two_nodes_each_read_the_whole_batch() -> None:
    """(pp=2, dp=2, tp=2): node n holds pipeline stage n, so both nodes read every shard."""
    staged = run(mesh=(("pp", 2), ("dp", 2), ("tp", 2)))
    assert staged.node_downloads.tolist() == [64, 64]  # type: ignore[attr-defined]


def test_a_mesh_whose_nodes_straddle_coordinates_is_refused() -> None:
    """(dp=4, tp=3) on 3 nodes of 4: node 1 holds ranks 4-7, coordinates 1 and 2, not an aligned band."""
    with pytest.raises(ConfigError, match=r"expected every node to read one aligned run of data-parallel coordinates"):
        run(nodes=3, mesh=(("dp", 4), ("tp", 3)))


def test_a_mesh_of_another_world_size_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"mesh: expected dims whose sizes multiply to the world size 8"):
        run(mesh=(("dp", 2), ("tp", 2)))
