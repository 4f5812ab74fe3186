"""Persistent workers survive repeated passes over one fixed epoch, and still advance training epochs."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.resume import assert_continues, assert_same_output, run_epochs, take_ids

from stream_plugin import StreamingDataLoader, StreamingDataset

BATCH = 8


class PidRecordingDataset(StreamingDataset):
    """Every sample says which process read it, so a test can see whether workers were restarted."""

    def get_item(self, sample_id: int) -> Any:
        return {**super().get_item(sample_id), "pid": os.getpid()}


@dataclass(frozen=True)
class Pass:
    ids: list[list[int]]
    pids: frozenset[int]


def make_dataset(remote: Path, cache: Path) -> PidRecordingDataset:
    return PidRecordingDataset(
        remote=f"file://{remote}", local=str(cache), batch_size=BATCH, shuffle=True, num_canonical_nodes=2
    )


def make_persistent_loader(remote: Path, cache: Path, **kwargs: Any) -> StreamingDataLoader:
    return StreamingDataLoader(
        make_dataset(remote, cache), batch_size=BATCH, num_workers=2, persistent_workers=True, **kwargs
    )


def read_pass(loader: Iterable[Any]) -> Pass:
    ids: list[list[int]] = []
    pids: set[int] = set()
    for batch in loader:
        ids.append([int(i) for i in batch["id"]])
        pids.update(int(pid) for pid in batch["pid"])
    return Pass(ids, frozenset(pids))


def read_epoch_again(loader: StreamingDataLoader, epoch: int) -> Pass:
    loader.dataset.set_epoch(epoch)
    return read_pass(loader)


@pytest.fixture
def reference(remote_1k: Path, tmp_path: Path) -> list[list[list[int]]]:
    """Epochs 0..2 as a fresh loader without workers reads them."""
    loader = StreamingDataLoader(make_dataset(remote_1k, tmp_path / "reference"), batch_size=BATCH)
    epochs = run_epochs(loader, 3)
    assert epochs[0] != epochs[1]  # shuffled: a replayed epoch is told apart from an advanced one
    return epochs


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_repeated_passes_at_a_fixed_epoch_reuse_the_workers(
    remote_1k: Path, tmp_path: Path, reference: list[list[list[int]]], context: str
) -> None:
    loader = make_persistent_loader(remote_1k, tmp_path, multiprocessing_context=context)
    passes = [read_epoch_again(loader, 0) for _ in range(4)]
    assert all(one.ids == reference[0] for one in passes)
    assert all(len(one.pids) == 2 and os.getpid() not in one.pids for one in passes)
    # The first workers were started to advance; the second pass shows the epoch repeats, and the
    # workers started for it replay it from then on.
    assert passes[1].pids.isdisjoint(passes[0].pids)
    assert passes[1].pids == passes[2].pids == passes[3].pids


def test_training_epochs_still_advance_on_the_same_workers(
    remote_1k: Path, tmp_path: Path, reference: list[list[list[int]]]
) -> None:
    loader = make_persistent_loader(remote_1k, tmp_path)
    passes = [read_pass(loader) for _ in range(3)]
    assert [one.ids for one in passes] == reference
    assert passes[0].pids == passes[1].pids == passes[2].pids


def test_replaying_workers_give_way_to_a_training_epoch_and_back(
    remote_1k: Path, tmp_path: Path, reference: list[list[list[int]]]
) -> None:
    loader = make_persistent_loader(remote_1k, tmp_path)
    replays = [read_epoch_again(loader, 0) for _ in range(3)]
    advanced = read_pass(loader)  # no rewind: the epoch after the last one begun
    again = read_epoch_again(loader, 0)
    assert [one.ids for one in replays] == [reference[0]] * 3
    assert advanced.ids == reference[1]
    assert again.ids == reference[0]
    assert advanced.pids.isdisjoint(replays[-1].pids)  # replaying workers cannot advance: restarted


def test_a_pass_abandoned_mid_way_is_replayed_in_full(
    remote_1k: Path, tmp_path: Path, reference: list[list[list[int]]]
) -> None:
    loader = make_persistent_loader(remote_1k, tmp_path)
    read_epoch_again(loader, 0)
    loader.dataset.set_epoch(0)
    assert take_ids(loader, 3) == reference[0][:3]  # a sanity check that stops early
    kept = read_epoch_again(loader, 0)
    assert kept.ids == reference[0]
    assert read_epoch_again(loader, 0) == kept


def test_a_loaded_state_restarts_replaying_workers_at_its_position(
    remote_1k: Path, tmp_path: Path, reference: list[list[list[int]]]
) -> None:
    loader = make_persistent_loader(remote_1k, tmp_path)
    for _ in range(2):
        read_epoch_again(loader, 0)
    source = StreamingDataLoader(make_dataset(remote_1k, tmp_path / "source"), batch_size=BATCH)
    take_ids(source)
    head = take_ids(source, 30)
    loader.load_state_dict(source.state_dict())
    assert_continues(head, take_ids(loader), reference[1])
    assert_same_output(take_ids(loader), reference[2], what="epoch 2 after the load")
