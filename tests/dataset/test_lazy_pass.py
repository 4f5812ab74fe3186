"""A pass is planned and located a piece at a time: the same samples as the whole-pass order, and the
first sample of a long epoch waits for the first piece only."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.datasets import write_ids
from support.orders import whole_order

from stream_plugin import MDSWriter, StreamingDataset, World
from stream_plugin.order.partition import rank_worker_batches
from stream_plugin.order.span_reader import SpanReader
from stream_plugin.order.topology import Topology
from stream_plugin.reading.cursor import IterationPlan
from stream_plugin.reading.shard_access import ShardAccess
from stream_plugin.reading.shard_table import ShardTable

SAMPLES = 20_000  # more than the first piece (4,096 samples), so a pass has several pieces


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ids(tmp_path_factory.mktemp("lazy") / "data", range(SAMPLES), size_limit=1 << 14, payload=1)


def _dataset(remote: Path, cache: Path, **kwargs: Any) -> StreamingDataset:
    return StreamingDataset(remote=remote.as_uri(), local=str(cache), batch_size=4, shuffle_seed=11, **kwargs)


@pytest.mark.parametrize("algorithm", ["none", "block", "intra_shard", "permute", "py1e"])
def test_pieces_of_a_pass_are_the_whole_order_for_every_rank_and_worker(
    remote: Path, tmp_path: Path, algorithm: str
) -> None:
    shuffle = {"shuffle": False} if algorithm == "none" else {"shuffle": True, "shuffle_algo": algorithm}
    for ranks, workers, consumed in [(1, 0, 0), (3, 2, 0), (2, 3, 4_800), (4, 1, 19_200)]:
        world = World(rank=0, world_size=ranks, local_rank=0, local_world_size=ranks)
        dataset = _dataset(remote, tmp_path, num_canonical_nodes=3, world=world, **shuffle)  # type: ignore[arg-type]
        G = dataset.global_batch_size
        plan = IterationPlan(0, consumed, G, 3)
        order = whole_order(dataset, plan)
        for rank in range(ranks):
            for worker in range(max(workers, 1)):
                topology = Topology(1, ranks, workers, rank=rank, worker=worker)
                whole = rank_worker_batches(order, consumed=consumed, global_batch_size=G, topology=topology)
                pieces = list(dataset.sample_id_pieces(plan, topology))
                assert len(pieces) > 1 or len(whole.flat()) <= 4096
                np.testing.assert_array_equal(np.concatenate(pieces), whole.flat())


def test_a_pass_read_in_pieces_yields_the_whole_order(remote: Path, tmp_path: Path) -> None:
    dataset = _dataset(remote, tmp_path, shuffle=True, world=World(rank=1, world_size=2, local_rank=1, local_world_size=2))
    plan = IterationPlan(0, 0, 8, dataset.world.num_nodes)
    # The whole epoch planned at once by the order maths (not the pieces the iterator reads from).
    whole = rank_worker_batches(
        whole_order(dataset, plan), consumed=0, global_batch_size=8, topology=dataset.topology()
    )
    assert [int(sample["id"]) for sample in dataset] == whole.flat().tolist()


def _many_shards(folder: Path, num_shards: int) -> Path:
    """An index listing ``num_shards`` 10-sample shards, only the first on disk (as bench_index makes)."""
    with MDSWriter(out=str(folder), columns={"id": "int"}) as writer:
        for sample in range(10):
            writer.write({"id": sample})
    document = json.loads((folder / "index.json").read_text())
    entry = document["shards"][0]
    entries = [{**entry, "raw_data": {**entry["raw_data"], "basename": f"shard.{number:05d}.mds"}} for number in range(num_shards)]
    (folder / "index.json").write_text(json.dumps({"shards": entries, "version": 2}))
    return folder


def test_first_sample_of_a_big_epoch_plans_and_locates_only_the_first_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _many_shards(tmp_path / "data", 20_000)  # 200,000 samples
    planned: list[int] = []
    located: list[int] = []
    read, locate = SpanReader.read, ShardTable.locate

    def counting_read(self: SpanReader, count: int) -> np.ndarray:
        planned.append(count)
        return read(self, count)

    def counting_locate(self: ShardTable, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        located.append(len(sample_ids))
        return locate(self, sample_ids)

    monkeypatch.setattr(SpanReader, "read", counting_read)
    monkeypatch.setattr(ShardTable, "locate", counting_locate)
    dataset = StreamingDataset(local=str(folder), batch_size=1, shuffle=False)
    assert int(next(iter(dataset))["id"]) == 0
    assert located == [4096]
    assert 0 < sum(planned) <= 1 << 21  # one span reader's piece at most, not the 200,000 samples...
    assert sum(planned) < len(dataset)  # ...whatever the piece size


def test_the_next_piece_downloads_while_the_last_samples_of_a_piece_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = write_ids(tmp_path / "small-shards", range(6_000), size_limit=1 << 9, payload=1)  # ~30 per shard
    yielded = [0]
    requested_at: dict[int, int] = {}
    prepare, prepare_ahead = ShardAccess.prepare, ShardAccess.prepare_ahead

    def recording(self: ShardAccess, shard_id: int) -> Path:
        requested_at.setdefault(int(shard_id), yielded[0])
        return prepare(self, shard_id)

    def recording_ahead(self: ShardAccess, shard_id: int) -> Path | None:
        requested_at.setdefault(int(shard_id), yielded[0])
        return prepare_ahead(self, shard_id)

    monkeypatch.setattr(ShardAccess, "prepare", recording)
    monkeypatch.setattr(ShardAccess, "prepare_ahead", recording_ahead)  # what the prefetch threads call
    dataset = StreamingDataset(remote=remote.as_uri(), local=str(tmp_path / "cache"), batch_size=1, predownload=64)
    shard_of = dataset.plan.table.locate(np.arange(6_000))[0]
    for sample in dataset:
        assert int(sample["id"]) == yielded[0]
        yielded[0] += 1
        if 4_000 <= yielded[0] < 4_096:
            time.sleep(0.002)  # give the prefetch threads time to start what the window asked for
    boundary = int(shard_of[4_096])
    if boundary == shard_of[4_095]:  # the first shard the second piece has to itself
        boundary += 1
    # The first piece holds 4,096 samples; the second piece's shards were asked for before it began.
    assert requested_at[boundary] < 4_096, requested_at[boundary]
