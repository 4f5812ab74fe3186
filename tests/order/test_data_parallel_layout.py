"""``DataParallelLayout`` and ``Topology(data_parallel=...)``: pure values, swept without processes."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.order.data_parallel import UNKNOWN, DataParallelLayout, agree_with_replication
from stream_plugin.order.layout import DatasetShape
from stream_plugin.order.partition import rank_worker_batches
from stream_plugin.order.plan import EpochOrder, OrderConfig, plan_epoch
from stream_plugin.order.topology import Topology


def mesh_layout(shape: tuple[int, ...], dp_dims: tuple[int, ...]) -> DataParallelLayout:
    """Ranks fill ``shape`` row-major; the coordinate is the dp dims' indices, flattened row-major."""
    world = int(np.prod(shape))
    coordinates = []
    for rank in range(world):
        index = np.unravel_index(rank, shape)
        coordinates.append(int(np.ravel_multi_index([index[d] for d in dp_dims], [shape[d] for d in dp_dims])))
    return DataParallelLayout(size=int(np.prod([shape[d] for d in dp_dims])), coordinates=tuple(coordinates))


def test_consecutive_is_mosaicml_replication() -> None:
    layout = DataParallelLayout.consecutive(8, 2)
    assert layout.coordinates == (0, 0, 1, 1, 2, 2, 3, 3)
    assert (layout.size, layout.replication) == (4, 2)
    assert layout.is_consecutive()


def test_a_mesh_with_tensor_parallel_outermost_is_not_consecutive() -> None:
    layout = mesh_layout((2, 4), dp_dims=(1,))  # (tp, dp)
    assert layout.coordinates == (0, 1, 2, 3, 0, 1, 2, 3)
    assert not layout.is_consecutive()
    assert [layout.replica_index(rank) for rank in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_a_size_that_does_not_divide_the_world_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"data_parallel_size: expected a divisor of the world size 8, found 3"):
        DataParallelLayout(size=3, coordinates=(0,) * 8)


def test_a_coordinate_outside_the_size_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"expected 0 <= coordinate < data_parallel_size=2 on every rank, found 2 on rank 1"):
        DataParallelLayout(size=2, coordinates=(0, 2, 1, 1))


def test_uneven_replicas_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"found coordinate 0 on 3 ranks \(\[0, 1, 2\]\)"):
        DataParallelLayout(size=2, coordinates=(0, 0, 0, 1))


def test_an_unknown_coordinate_is_refused_when_read() -> None:
    layout = DataParallelLayout(size=2, coordinates=(UNKNOWN, 1, UNKNOWN, UNKNOWN))
    assert layout.coordinate(1) == 1
    assert layout.replica_index(1) is None
    with pytest.raises(ConfigError, match="found it unknown"):
        layout.coordinate(0)


@pytest.mark.parametrize(
    ("layout", "node", "expected"),
    [
        (DataParallelLayout.consecutive(8, 2), 1, (2, 2)),  # ranks 4-7 read coordinates 2, 3
        (mesh_layout((2, 4), (1,)), 0, (0, 4)),  # (tp, dp) on 2 nodes of 4: every node reads all 4
        (mesh_layout((2, 2, 2), (1,)), 1, (0, 2)),  # (pp, dp, tp): node 1 is pipeline stage 1, both coordinates
        (mesh_layout((4, 2), (1,)), 0, (0, 2)),  # (cp, dp): node 0 reads both coordinates
        (DataParallelLayout(size=4, coordinates=(0, 2, 1, 3, 0, 2, 1, 3)), 0, (0, 4)),
        (DataParallelLayout(size=4, coordinates=(0, 2, 0, 2, 1, 3, 1, 3)), 0, None),  # 0 and 2: no band
        (DataParallelLayout(size=2, coordinates=(0, UNKNOWN, 1, UNKNOWN)), 0, None),
    ],
)
def test_node_band_is_the_coordinates_a_node_reads(
    layout: DataParallelLayout, node: int, expected: tuple[int, int] | None
) -> None:
    assert layout.node_band(node, ranks_per_node=layout.world_size // 2) == expected


def test_replication_must_agree_with_a_layout() -> None:
    agree_with_replication(DataParallelLayout.consecutive(8, 2), 2, "the mesh")
    with pytest.raises(ConfigError, match=r"replication: expected it to agree with the mesh .*found replication=2"):
        agree_with_replication(mesh_layout((2, 4), (1,)), 2, "the mesh")
    with pytest.raises(ConfigError, match="found replication=4"):
        agree_with_replication(DataParallelLayout.consecutive(8, 2), 4, "the mesh")


def test_a_topology_with_a_layout_reads_its_coordinate() -> None:
    layout = mesh_layout((2, 2, 2), (0,))  # (dp, pp, tp): ranks 0-3 coordinate 0, 4-7 coordinate 1
    topology = Topology(num_nodes=2, ranks_per_node=4, rank=5, data_parallel=layout)
    assert (topology.data_parallel_rank, topology.data_parallel_size, topology.replication) == (1, 2, 4)
    assert topology.with_position(2).data_parallel_rank == 0


def test_a_topology_refuses_a_replication_beside_another_layout() -> None:
    with pytest.raises(ConfigError, match=r"replication: expected 2 \(world_size / data_parallel size\) or 1"):
        Topology(num_nodes=1, ranks_per_node=8, replication=4, data_parallel=DataParallelLayout.consecutive(8, 2))


def test_a_topology_refuses_a_layout_of_another_world() -> None:
    with pytest.raises(ConfigError, match="expected a layout of world_size=4 ranks, found one of 8"):
        Topology(num_nodes=1, ranks_per_node=4, data_parallel=DataParallelLayout.consecutive(8, 2))


def epoch_order(method: str, device_batch_size: int) -> EpochOrder:
    """One epoch of three streams (300, 500 and 199 samples) in 8 shards, 40 per global batch."""
    config = OrderConfig(
        shuffle=True,
        shuffle_algo="block",
        shuffle_block_size=32,
        num_canonical_nodes=4,
        batching_method=method,  # type: ignore[arg-type]
        global_batch_size=40,
        device_batch_size=device_batch_size if method == "device_per_stream" else None,
    )
    shape = DatasetShape(np.array([50, 100, 150, 120, 130, 250, 100, 99]), np.array([0, 0, 0, 1, 1, 1, 2, 2]))
    return plan_epoch(shape, [np.arange(n) for n in (300, 500, 199)], config, epoch=1)


@pytest.mark.parametrize("method", ["random", "stratified", "per_stream", "device_per_stream"])
@pytest.mark.parametrize(("shape", "dp_dims"), [((2, 2, 2), (1,)), ((2, 4), (1,)), ((4, 2), (0,)), ((2, 2, 2), (0, 1))])
def test_a_layout_gives_each_rank_the_batches_of_its_coordinate(
    method: str, shape: tuple[int, ...], dp_dims: tuple[int, ...]
) -> None:
    """Swept over every (rank, worker) and batching method: a rank yields exactly what rank
    ``coordinate`` of a plain data-parallel job of that size yields, from the start and mid-epoch."""
    layout = mesh_layout(shape, dp_dims)
    order = epoch_order(method, 40 // layout.size)
    for rank, workers, consumed in itertools.product(range(layout.world_size), (0, 2), (0, 80)):
        ranks_per_node = layout.world_size // 2
        ours = Topology(num_nodes=2, ranks_per_node=ranks_per_node, workers_per_rank=workers, rank=rank, data_parallel=layout)
        coordinate = layout.coordinates[rank]
        plain = Topology(num_nodes=1, ranks_per_node=layout.size, workers_per_rank=workers, rank=coordinate)
        for worker in range(max(1, workers)):
            got = rank_worker_batches(order, consumed=consumed, global_batch_size=40, topology=replace(ours, worker=worker))
            want = rank_worker_batches(order, consumed=consumed, global_batch_size=40, topology=replace(plain, worker=worker))
            np.testing.assert_array_equal(got.flat(), want.flat())
            assert got.last_real == want.last_real
