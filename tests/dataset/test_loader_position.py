"""``StreamingDataLoader.position``: a read-only view of the pass in progress."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from support.resume import take_ids
from torch.utils.data import DataLoader

from stream_plugin import StreamingDataLoader, StreamingDataset
from stream_plugin.reading.loader import LoaderPosition

BATCH = 8  # 1,000 samples -> 125 global batches per epoch


def make_loader(remote: Path, cache: Path, **kwargs: object) -> StreamingDataLoader:
    dataset = StreamingDataset(
        remote=f"file://{remote}", local=str(cache), batch_size=BATCH, shuffle=True, num_canonical_nodes=2
    )
    return StreamingDataLoader(dataset, batch_size=BATCH, **kwargs)  # type: ignore[arg-type]


def test_position_is_none_before_the_first_pass_and_after_a_complete_one(
    remote_1k: Path, tmp_path: Path
) -> None:
    loader = make_loader(remote_1k, tmp_path)
    assert loader.position is None
    take_ids(loader)
    assert loader.position is None


def test_position_counts_the_batches_handed_out_not_those_prefetched(remote_1k: Path, tmp_path: Path) -> None:
    loader = make_loader(remote_1k, tmp_path, num_workers=2)
    seen = []
    for batch_number, _ in enumerate(loader, start=1):
        seen.append(loader.position)
        if batch_number == 3:
            break
    assert seen == [
        LoaderPosition(epoch=0, start=0, batches=n, sample_in_epoch=n * BATCH, epoch_batch_size=BATCH)
        for n in (1, 2, 3)
    ]
    assert loader.position == seen[-1]  # an abandoned pass keeps its position, as state_dict() does


def test_position_names_the_epoch_of_the_pass(remote_1k: Path, tmp_path: Path) -> None:
    loader = make_loader(remote_1k, tmp_path)
    take_ids(loader)
    next(iter(loader))
    position = loader.position
    assert position is not None
    assert (position.epoch, position.start, position.batches) == (1, 0, 1)


def test_position_after_a_resume_starts_at_the_resume_point_and_agrees_with_the_state(
    remote_1k: Path, tmp_path: Path
) -> None:
    source = make_loader(remote_1k, tmp_path)
    take_ids(source)
    take_ids(source, 30)
    loader = make_loader(remote_1k, tmp_path)
    loader.load_state_dict(source.state_dict())
    take_ids(loader, 2)
    position = loader.position
    assert position == LoaderPosition(
        epoch=1, start=30 * BATCH, batches=2, sample_in_epoch=32 * BATCH, epoch_batch_size=BATCH
    )
    state = loader.state_dict()
    assert (state["epoch"], state["sample_in_epoch"], state["epoch_batch_size"]) == (
        position.epoch,
        position.sample_in_epoch,
        position.epoch_batch_size,
    )


def test_position_is_read_only(remote_1k: Path, tmp_path: Path) -> None:
    loader = make_loader(remote_1k, tmp_path)
    next(iter(loader))
    position = loader.position
    assert position is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        position.batches = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        loader.position = position  # type: ignore[misc]


def test_position_of_a_map_style_dataset_is_none() -> None:
    loader = StreamingDataLoader(list(range(10)), batch_size=2)
    assert not isinstance(loader.dataset, StreamingDataset)
    next(iter(loader))
    assert loader.position is None
    assert isinstance(loader, DataLoader)
