"""StreamingDataLoader against torchdata's StatefulDataLoader contract, with the one resume helper.

Both loaders go through the same ``assert_resumes_identically`` trials: the state before the first batch
(cut 0), after k batches, after the last batch of an epoch (cut = an epoch's batches, before the
iterator is seen to end) and inside the next epoch; ``state_dict()`` is taken while the pass's iterator
is alive, so with 2 workers it is taken while they run and prefetch. Where the two differ by design
(docs/loops/pytorch.md): torchdata keeps one state per worker, so a state loads only into a loader with
the same ``num_workers``; ours is one global position, so it also loads into another worker count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from support.datasets import write_ids
from support.resume import assert_resumes_identically

from stream_plugin import StreamingDataLoader, StreamingDataset

torchdata = pytest.importorskip("torchdata.stateful_dataloader")

SAMPLES = 40
BATCH = 4
EPOCH = SAMPLES // BATCH
CUTS = [0, 3, EPOCH - 1, EPOCH, EPOCH + 2]


class Ids(torch.utils.data.Dataset[dict[str, int]]):
    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> dict[str, int]:
        return {"id": index}


class CountingIds(torch.utils.data.IterableDataset[int]):
    """An IterableDataset with torchdata's per-worker state: the next id each worker yields."""

    def __init__(self) -> None:
        self.next_id = 0

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for sample_id in range(self.next_id, SAMPLES):
            if sample_id % workers == worker:
                self.next_id = sample_id + 1
                yield sample_id

    def state_dict(self) -> dict[str, int]:
        return {"next_id": self.next_id}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.next_id = state["next_id"]


@pytest.fixture(scope="module")
def ids_remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ids(tmp_path_factory.mktemp("contract") / "data", range(SAMPLES))


def torchdata_loader(workers: int) -> Any:
    # Unshuffled: a shuffled StatefulDataLoader's epochs after a resume follow the generator the caller
    # passes, not the saved state (a fresh generator gives other later epochs), which is not the contract
    # in question here.
    return torchdata.StatefulDataLoader(Ids(), batch_size=BATCH, num_workers=workers)


def streaming_loader(remote: Path, workers: int) -> StreamingDataLoader:
    dataset = StreamingDataset(local=str(remote), shuffle=True, shuffle_seed=3, batch_size=BATCH)
    return StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers)


@pytest.mark.parametrize("workers", [0, 2])
def test_torchdata_stateful_loader_meets_the_contract(workers: int) -> None:
    assert_resumes_identically([lambda: torchdata_loader(workers)] * 2, cuts=CUTS, epochs=2)


@pytest.mark.parametrize("workers", [0, 2])
def test_streaming_loader_meets_the_same_contract(ids_remote: Path, workers: int) -> None:
    assert_resumes_identically([lambda: streaming_loader(ids_remote, workers)] * 2, cuts=CUTS, epochs=2)


def test_streaming_state_loads_into_another_worker_count(ids_remote: Path) -> None:
    """Where ours deliberately differs: one global state, so 2 workers -> 0 -> 3 continues exactly."""
    makers = [lambda: streaming_loader(ids_remote, 2), lambda: streaming_loader(ids_remote, 0)]
    makers.append(lambda: streaming_loader(ids_remote, 3))
    assert_resumes_identically(makers, cuts=[(3, 4), (EPOCH, 1)], epochs=2)


@pytest.mark.parametrize("workers", [0, 3])
def test_a_torchdata_iterable_state_loads_only_into_the_same_worker_count(workers: int) -> None:
    """What ours does differently: torchdata saves one dataset state per worker (``_worker_snapshots``)."""
    loader = torchdata.StatefulDataLoader(CountingIds(), batch_size=BATCH, num_workers=2)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    state = loader.state_dict()
    assert set(state["_snapshot"]["_worker_snapshots"]) == {"worker_0", "worker_1"}
    other = torchdata.StatefulDataLoader(CountingIds(), batch_size=BATCH, num_workers=workers)
    with pytest.raises(AssertionError):
        other.load_state_dict(state)
        next(iter(other))


def test_the_state_is_one_flat_dict_of_plain_values(ids_remote: Path) -> None:
    loader = streaming_loader(ids_remote, 2)
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()  # workers running
    assert all(isinstance(value, int | str) for value in state.values())
    assert state["sample_in_epoch"] == BATCH
    del iterator
