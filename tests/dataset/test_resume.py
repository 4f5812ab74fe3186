"""Exact resumption through StreamingDataLoader: every cut, workers, epochs, double resumes, batch sizes."""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from support.resume import (
    assert_continues,
    assert_resumes_identically,
    assert_same_output,
    run_epochs,
    take_ids,
)

from stream_plugin import StateError, StreamingDataLoader, StreamingDataset

BATCH = 8  # 1,000 samples -> 125 global batches per epoch
EPOCH = 1000 // BATCH


def make_loader(
    remote: Path, cache: Path, *, batch: int = BATCH, workers: int = 0, **kwargs: Any
) -> StreamingDataLoader:
    dataset_kwargs = {key: kwargs.pop(key) for key in list(kwargs) if key in ("shuffle_seed", "epoch_size")}
    dataset = StreamingDataset(
        remote=f"file://{remote}",
        local=str(cache),
        batch_size=batch,
        shuffle=True,
        num_canonical_nodes=2,
        **dataset_kwargs,
    )
    return StreamingDataLoader(dataset, batch_size=batch, num_workers=workers, **kwargs)


def factory(remote: Path, cache: Path, **kwargs: Any) -> Callable[[], StreamingDataLoader]:
    return lambda: make_loader(remote, cache, **kwargs)


def test_resume_mid_epoch_zero_is_exact(remote_1k: Path, tmp_path: Path) -> None:
    make = factory(remote_1k, tmp_path)
    assert_resumes_identically([make, make], cuts=[0, 1, 7, 64, 124], epochs=2)


def test_resume_mid_later_epoch_is_exact(remote_1k: Path, tmp_path: Path) -> None:
    make = factory(remote_1k, tmp_path)
    assert_resumes_identically([make, make], cuts=[EPOCH + 3, EPOCH + 100], epochs=3)


@pytest.mark.parametrize(("before", "after"), [(0, 2), (2, 0), (2, 1)])
def test_resume_with_other_worker_counts_is_exact(
    remote_1k: Path, tmp_path: Path, before: int, after: int
) -> None:
    assert_resumes_identically(
        [factory(remote_1k, tmp_path, workers=before), factory(remote_1k, tmp_path, workers=after)],
        cuts=[5, 62],
        epochs=2,
    )


def test_order_does_not_depend_on_workers(remote_1k: Path, tmp_path: Path) -> None:
    reference = run_epochs(make_loader(remote_1k, tmp_path), 2)
    assert run_epochs(make_loader(remote_1k, tmp_path, workers=2), 2) == reference
    assert run_epochs(make_loader(remote_1k, tmp_path, workers=3, persistent_workers=True), 2) == reference


def test_state_counts_batches_the_caller_took_not_what_workers_prefetched(
    remote_1k: Path, tmp_path: Path
) -> None:
    loader = make_loader(remote_1k, tmp_path, workers=2, prefetch_factor=4)
    take_ids(loader, 3)
    assert loader.state_dict()["sample_in_epoch"] == 3 * BATCH


def test_epoch_boundary_state_starts_the_next_epoch_without_replay(remote_1k: Path, tmp_path: Path) -> None:
    reference = run_epochs(make_loader(remote_1k, tmp_path), 3)
    loader = make_loader(remote_1k, tmp_path)
    assert take_ids(loader) == reference[0]
    state = loader.state_dict()
    assert (state["epoch"], state["sample_in_epoch"]) == (1, 0)
    resumed = make_loader(remote_1k, tmp_path)
    resumed.load_state_dict(state)
    for epoch, batches in enumerate(run_epochs(resumed, 2), start=1):
        assert_same_output(batches, reference[epoch], what=f"epoch {epoch} after the resume")


def test_composer_style_zero_samples_after_an_epoch_means_next_epoch(remote_1k: Path, tmp_path: Path) -> None:
    loader = make_loader(remote_1k, tmp_path, workers=2)
    take_ids(loader)
    state = loader.dataset.state_dict(0, True)
    assert (state["epoch"], state["sample_in_epoch"]) == (1, 0)


def test_state_on_the_last_batch_of_an_epoch_closes_it_then_continues(
    remote_1k: Path, tmp_path: Path
) -> None:
    reference = run_epochs(make_loader(remote_1k, tmp_path), 2)
    loader = make_loader(remote_1k, tmp_path)
    take_ids(loader, 125)  # every batch taken, but the loader was not asked for more
    state = loader.state_dict()
    assert (state["epoch"], state["sample_in_epoch"]) == (0, 1000)
    resumed = make_loader(remote_1k, tmp_path)
    resumed.load_state_dict(state)
    assert take_ids(resumed) == []  # the rest of epoch 0 is empty: the caller's epoch loop ends it
    assert_same_output(take_ids(resumed), reference[1], what="epoch 1 after the resume")


def test_composer_reading_epochs_with_islice_never_replays_an_epoch(remote_1k: Path, tmp_path: Path) -> None:
    reference = run_epochs(make_loader(remote_1k, tmp_path), 2)
    loader = make_loader(remote_1k, tmp_path, workers=2)
    batches = [[int(i) for i in batch["id"]] for batch in itertools.islice(loader, len(loader))]
    assert batches == reference[0]
    dataset = loader.dataset
    at_boundary = dataset.state_dict(0, True)  # '1ep' save: Composer's clock already moved on
    on_last_batch = dataset.state_dict(1000, True)  # a save on the last batch, clock still in epoch 0
    assert (at_boundary["epoch"], at_boundary["sample_in_epoch"]) == (1, 0)
    assert (on_last_batch["epoch"], on_last_batch["sample_in_epoch"]) == (0, 1000)
    resumed = make_loader(remote_1k, tmp_path)
    resumed.load_state_dict(at_boundary)
    assert_same_output(take_ids(resumed), reference[1], what="epoch 1 after the resume")


def test_double_resume_is_exact(remote_1k: Path, tmp_path: Path) -> None:
    reference = run_epochs(make_loader(remote_1k, tmp_path), 2)
    first = make_loader(remote_1k, tmp_path, workers=2)
    head = take_ids(first, 10)
    second = make_loader(remote_1k, tmp_path)
    second.load_state_dict(first.state_dict())
    middle = take_ids(second, 40)
    third = make_loader(remote_1k, tmp_path, workers=1)
    third.load_state_dict(second.state_dict())
    assert_same_output([*head, *middle, *take_ids(third)], reference[0], checkpoints=[10, 50])
    assert_same_output(take_ids(third), reference[1], what="epoch 1 after two resumes")


def test_loading_into_a_loader_that_already_iterated_takes_effect(remote_1k: Path, tmp_path: Path) -> None:
    reference = run_epochs(make_loader(remote_1k, tmp_path), 1)[0]
    source = make_loader(remote_1k, tmp_path)
    head = take_ids(source, 20)
    state = source.state_dict()
    target = make_loader(remote_1k, tmp_path, workers=2, persistent_workers=True)
    take_ids(target, 50)
    target.load_state_dict(state)
    assert_continues(head, take_ids(target), reference)


def test_state_loads_under_torch_weights_only(remote_1k: Path, tmp_path: Path) -> None:
    loader = make_loader(remote_1k, tmp_path)
    take_ids(loader, 4)
    buffer = io.BytesIO()
    torch.save(loader.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert state == loader.state_dict()
    assert len(state) <= 8


def test_state_from_other_settings_is_refused_unless_not_strict(remote_1k: Path, tmp_path: Path) -> None:
    source = make_loader(remote_1k, tmp_path)
    take_ids(source, 4)
    other = make_loader(remote_1k, tmp_path, shuffle_seed=1)
    with pytest.raises(StateError, match="expected fingerprint .* found"):
        other.load_state_dict(source.state_dict())
    other.load_state_dict(source.state_dict(), strict=False)
    assert len(take_ids(other)) == 125 - 4


def test_changed_global_batch_size_skips_and_repeats_nothing(remote_1k: Path, tmp_path: Path) -> None:
    reference = [i for batch in run_epochs(make_loader(remote_1k, tmp_path), 1)[0] for i in batch]
    source = make_loader(remote_1k, tmp_path)
    head = [i for batch in take_ids(source, 30) for i in batch]
    resumed = make_loader(remote_1k, tmp_path, batch=12)
    resumed.load_state_dict(source.state_dict())
    rest_batches = take_ids(resumed)
    rest = [i for batch in rest_batches for i in batch]
    assert all(len(batch) == 12 for batch in rest_batches[:-1]) and len(rest_batches[-1]) <= 12
    assert_continues(head, rest, reference)  # the same order, re-chunked: nothing skipped or repeated


def test_resume_before_any_iteration_keeps_a_loaded_state(remote_1k: Path, tmp_path: Path) -> None:
    source = make_loader(remote_1k, tmp_path)
    take_ids(source, 9)
    state = source.state_dict()
    target = make_loader(remote_1k, tmp_path)
    target.load_state_dict(state)
    assert target.state_dict() == state


def test_loader_length_is_batches_per_epoch(remote_1k: Path, tmp_path: Path) -> None:
    assert len(make_loader(remote_1k, tmp_path)) == 125


def test_a_state_without_a_version_mid_epoch_resumes_when_not_strict(remote_1k: Path, tmp_path: Path) -> None:
    """A MosaicML-shaped state (no version, fingerprint or batch size) continues at its sample count."""
    source = make_loader(remote_1k, tmp_path)
    take_ids(source, 4)
    written = source.state_dict()
    state = {key: value for key, value in written.items() if key not in ("version", "fingerprint", "epoch_batch_size")}
    other = make_loader(remote_1k, tmp_path)
    other.load_state_dict(state, strict=False)
    assert len(take_ids(other)) == 125 - 4
