"""``StreamingDataset``'s data-parallel arguments in one process: the int form, and every bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.datasets import write_ids

from stream_plugin import StreamingDataLoader, StreamingDataset, World
from stream_plugin.errors import ConfigError, ConfigTypeError


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ids(tmp_path_factory.mktemp("dp") / "data", range(100), size_limit=1 << 10)


def dataset(folder: Path, rank: int, world_size: int, **options: object) -> StreamingDataset:
    world = World(rank=rank, world_size=world_size, local_rank=rank % 4, local_world_size=4)
    return StreamingDataset(local=str(folder), batch_size=2, shuffle=True, num_canonical_nodes=2, world=world, **options)  # type: ignore[arg-type]


def batches(data: StreamingDataset) -> list[list[int]]:
    return [batch["id"].tolist() for batch in StreamingDataLoader(data, batch_size=2)]


def test_the_int_form_reads_the_batches_of_its_data_parallel_rank(folder: Path) -> None:
    ours = dataset(folder, rank=5, world_size=8, data_parallel_rank=1, data_parallel_size=4)
    plain = dataset(folder, rank=1, world_size=4)
    assert (ours.data_parallel_rank, ours.data_parallel_size, ours.global_batch_size) == (1, 4, 8)
    assert len(ours) == len(plain)
    assert batches(ours) == batches(plain)


def test_without_a_process_group_the_int_form_knows_only_its_own_coordinate(folder: Path) -> None:
    layout = dataset(folder, rank=5, world_size=8, data_parallel_rank=1, data_parallel_size=4).data_parallel
    assert layout.coordinates == (-1, -1, -1, -1, -1, 1, -1, -1)


def test_a_data_parallel_size_that_does_not_divide_the_world_is_refused(folder: Path) -> None:
    with pytest.raises(ConfigError, match=r"data_parallel_size: expected a divisor of the world size 8, found 3; pass one of \[1, 2, 4, 8\]"):
        dataset(folder, rank=0, world_size=8, data_parallel_rank=0, data_parallel_size=3)


def test_a_data_parallel_rank_outside_the_size_is_refused(folder: Path) -> None:
    with pytest.raises(ConfigError, match=r"data_parallel_rank: expected .*found 4; pass this rank's index among the 4"):
        dataset(folder, rank=0, world_size=8, data_parallel_rank=4, data_parallel_size=4)


def test_a_data_parallel_rank_without_a_size_is_refused(folder: Path) -> None:
    with pytest.raises(ConfigError, match="data_parallel_size: expected it beside data_parallel_rank, found only"):
        dataset(folder, rank=0, world_size=8, data_parallel_rank=0)


def test_a_replication_that_contradicts_the_int_form_is_refused(folder: Path) -> None:
    # replication=2 puts rank 3 on coordinate 1; the ints say 3.
    with pytest.raises(ConfigError, match=r"replication: expected it to agree with data_parallel_rank / data_parallel_size"):
        dataset(folder, rank=3, world_size=8, data_parallel_rank=3, data_parallel_size=4, replication=2)


def test_a_replication_that_agrees_with_the_int_form_is_accepted(folder: Path) -> None:
    data = dataset(folder, rank=3, world_size=8, data_parallel_rank=1, data_parallel_size=4, replication=2)
    assert data.data_parallel_rank == 1


def test_a_mesh_that_is_not_a_device_mesh_is_refused(folder: Path) -> None:
    with pytest.raises(ConfigTypeError, match=r"data_parallel_mesh: expected a torch.distributed.device_mesh.DeviceMesh"):
        dataset(folder, rank=0, world_size=8, data_parallel_mesh=[0, 1])


def test_a_replica_other_than_the_first_counts_no_samples(folder: Path) -> None:
    """Exact evaluation: replicas read the same batches; only the first of each set counts them."""
    first = dataset(folder, rank=2, world_size=8, replication=2)
    second = dataset(folder, rank=3, world_size=8, replication=2)
    counts = []
    for data in (first, second):
        loader = StreamingDataLoader(data, batch_size=2)
        counts.append(sum(loader.real_samples(index) for index, _ in enumerate(loader)))
    assert counts == [len(first), 0]
