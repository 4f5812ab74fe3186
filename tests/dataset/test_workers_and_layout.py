"""State reaches DataLoader workers under fork and spawn; replication; use without our loader."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.resume import assert_continues, assert_same_output, run_epochs, take_ids
from torch.utils.data import DataLoader

from stream_plugin import StreamingDataLoader, StreamingDataset


def make_dataset(remote: Path, cache: Path, **kwargs: object) -> StreamingDataset:
    return StreamingDataset(
        remote=f"file://{remote}",
        local=str(cache),
        batch_size=8,
        shuffle=True,
        num_canonical_nodes=2,
        **kwargs,
    )


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_resume_state_reaches_workers_under_fork_and_spawn(
    remote_1k: Path, tmp_path: Path, context: str
) -> None:
    reference = run_epochs(StreamingDataLoader(make_dataset(remote_1k, tmp_path), batch_size=8), 2)
    source = StreamingDataLoader(make_dataset(remote_1k, tmp_path), batch_size=8)
    head = take_ids(source, 30)
    loader = StreamingDataLoader(
        make_dataset(remote_1k, tmp_path), batch_size=8, num_workers=2, multiprocessing_context=context
    )
    loader.load_state_dict(source.state_dict())
    assert_continues(head, take_ids(loader), reference[0])
    assert_same_output(take_ids(loader), reference[1], what="epoch 1 after the resume")


def test_persistent_workers_follow_epochs_and_a_later_load(remote_1k: Path, tmp_path: Path) -> None:
    reference = run_epochs(StreamingDataLoader(make_dataset(remote_1k, tmp_path), batch_size=8), 3)
    loader = StreamingDataLoader(
        make_dataset(remote_1k, tmp_path), batch_size=8, num_workers=2, persistent_workers=True
    )
    assert run_epochs(loader, 2) == reference[:2]
    state = loader.state_dict()
    assert (state["epoch"], state["sample_in_epoch"]) == (2, 0)
    take_ids(loader, 5)  # epoch 2 starts on the live workers ...
    loader.load_state_dict(state)  # ... and a load restarts them at the saved position
    assert_same_output(take_ids(loader), reference[2], what="epoch 2 after the load")


def test_replication_gives_identical_data_to_consecutive_ranks(
    remote_1k: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    per_rank = []
    for rank in range(4):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "4")
        dataset = make_dataset(remote_1k, tmp_path / f"r{rank}", replication=2)
        per_rank.append([sample["id"] for sample in dataset])
    assert per_rank[0] == per_rank[1] and per_rank[2] == per_rank[3]
    assert per_rank[0] != per_rank[2]
    both = per_rank[0] + per_rank[2]
    assert set(both) == set(range(1000))
    # Global batch 16 = 2 data-parallel groups x 8: 62 whole batches, then 8 samples, 4 per group.
    assert len(per_rank[0]) == len(dataset) == 62 * 8 + 4
    assert len(both) == 1000  # no repeats: 1000 divides by the 2 data-parallel groups


def test_dataset_iterated_directly_advances_its_epoch(remote_1k: Path, tmp_path: Path) -> None:
    dataset = make_dataset(remote_1k, tmp_path)
    reference = run_epochs(StreamingDataLoader(make_dataset(remote_1k, tmp_path), batch_size=8), 2)
    loader = DataLoader(dataset, batch_size=8)  # a plain DataLoader without workers
    assert run_epochs(loader, 2) == reference


def test_set_epoch_drives_a_plain_dataloader_with_workers(remote_1k: Path, tmp_path: Path) -> None:
    reference = run_epochs(StreamingDataLoader(make_dataset(remote_1k, tmp_path), batch_size=8), 2)
    dataset = make_dataset(remote_1k, tmp_path)
    loader = DataLoader(dataset, batch_size=8, num_workers=2)
    seen = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        seen.append(take_ids(loader))
    assert seen == reference


def test_loader_and_dataset_batch_sizes_must_agree(remote_1k: Path, tmp_path: Path) -> None:
    from stream_plugin import ConfigError

    with pytest.raises(
        ConfigError, match="expected batch_size=8 as the dataset's per-device batch_size, found 4"
    ):
        StreamingDataLoader(make_dataset(remote_1k, tmp_path), batch_size=4)


def test_loader_fills_in_an_unset_dataset_batch_size(remote_1k: Path, tmp_path: Path) -> None:
    dataset = StreamingDataset(remote=f"file://{remote_1k}", local=str(tmp_path))
    loader = StreamingDataLoader(dataset, batch_size=16)
    assert dataset.batch_size == 16 and len(loader) == 63  # 62 whole batches and a short one of 8


def test_ndarray_batches_collate_without_the_read_only_warning(tmp_path: Path) -> None:
    import warnings

    import numpy as np

    from stream_plugin import MDSWriter

    with MDSWriter(out=str(tmp_path / "arrays"), columns={"x": "ndarray:float32:3"}) as writer:
        for i in range(16):
            writer.write({"x": np.full(3, i, np.float32)})
    dataset = StreamingDataset(local=str(tmp_path / "arrays"), batch_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = list(StreamingDataLoader(dataset, batch_size=4))
    assert batches[0]["x"].shape == (4, 3)
    batches[0]["x"][0, 0] = -1.0  # collate copied: the batch is writable and the shard untouched
    assert dataset[0]["x"][0] == 0.0
