"""The integration's loaders on their own: EvalLoader keeps persistent workers, TrainLoader's first-batch check."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.datasets import write_ids
from support.resume import take_ids

from stream_plugin import EvalLoader, StreamingDataLoader, StreamingDataset
from stream_plugin_lightning.loaders import TrainLoader

BATCH = 8


class PidRecordingDataset(StreamingDataset):
    """Every sample says which process read it, so a test can see whether workers were restarted."""

    def get_item(self, sample_id: int) -> Any:
        return {**super().get_item(sample_id), "pid": os.getpid()}


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ids(tmp_path_factory.mktemp("loaders") / "remote", range(200))


def make_dataset(remote: Path, cache: Path) -> PidRecordingDataset:
    return PidRecordingDataset(
        remote=f"file://{remote}", local=str(cache), batch_size=BATCH, shuffle=True, num_canonical_nodes=2
    )


def test_eval_loader_replays_epoch_zero_on_the_same_persistent_workers(remote: Path, tmp_path: Path) -> None:
    epoch_zero = take_ids(StreamingDataLoader(make_dataset(remote, tmp_path / "reference"), batch_size=BATCH))
    loader = EvalLoader(
        make_dataset(remote, tmp_path), batch_size=BATCH, num_workers=2, persistent_workers=True
    )
    pids_per_pass = []
    for _ in range(3):
        ids: list[list[int]] = []
        pids: set[int] = set()
        for batch in loader:
            ids.append([int(i) for i in batch["id"]])
            pids.update(int(pid) for pid in batch["pid"])
        assert ids == epoch_zero
        pids_per_pass.append(pids)
    assert len(pids_per_pass[0]) == 2
    assert pids_per_pass[0] == pids_per_pass[1] == pids_per_pass[2]


@pytest.mark.parametrize(("expected_epoch", "mismatch"), [(0, False), (1, True)])
def test_train_loader_checks_the_position_after_the_first_batch(
    remote: Path, tmp_path: Path, expected_epoch: int, mismatch: bool
) -> None:
    reports: list[tuple[dict[str, Any], dict[str, Any]]] = []
    expected: dict[str, int | str] = {"epoch": expected_epoch, "sample_in_epoch": BATCH}
    loader = TrainLoader(
        make_dataset(remote, tmp_path),
        batch_size=BATCH,
        expected_after_first_batch=lambda: expected,
        on_mismatch=lambda wanted, found: reports.append((wanted, found)),
    )
    take_ids(loader, 2)
    found = {"epoch": 0, "sample_in_epoch": BATCH, "epoch_batch_size": BATCH}
    assert reports == ([(expected, found)] if mismatch else [])
