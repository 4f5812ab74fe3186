"""How a loader talks to a dataset: ``begin_pass``, ``handing_over`` and ``finish_pass``, plus the
``workers_should_replay`` hook and the ``transform`` hook."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stream_plugin import ConfigError, ConfigTypeError, LoaderPass, StreamingDataLoader, StreamingDataset

BATCH = 8


def make_dataset(remote: Path, cache: Path, **kwargs: Any) -> StreamingDataset:
    options: dict[str, Any] = {"batch_size": BATCH, "shuffle": True, "num_canonical_nodes": 2, **kwargs}
    return StreamingDataset(remote=f"file://{remote}", local=str(cache), **options)


def ids_of(samples: Any) -> list[int]:
    return [int(sample["id"]) for sample in samples]


def test_begin_pass_says_how_many_batches_of_which_size(remote_1k: Path, tmp_path: Path) -> None:
    dataset = make_dataset(remote_1k, tmp_path, batch_size=16)
    current = dataset.begin_pass()
    assert isinstance(current, LoaderPass)
    # 1,000 samples at 16: 62 whole batches and one of 8.
    assert (current.plan.epoch, current.plan.start, current.batches) == (0, 0, 63)
    assert current.batch_counts(0) == (16, 16)
    assert current.batch_counts(62) == (8, 8)
    assert current.sample_in_epoch(63) == current.samples_in_epoch == 1000
    with pytest.raises(ConfigError, match=r"batch_idx: expected an int in \[0, 62\], found 63; pass the index of the batch within the current pass of 63"):
        current.batch_counts(63)


def test_handing_over_gives_the_pass_to_the_next_reader_once(remote_1k: Path, tmp_path: Path) -> None:
    dataset = make_dataset(remote_1k, tmp_path)
    dataset.set_epoch(3)
    plan = dataset.begin_pass().plan
    with dataset.handing_over(plan):
        handed = ids_of(iter(dataset))  # the reader started inside the block reads epoch 3
        after = ids_of(iter(dataset))  # the next reader, still inside, plans its own pass
    epoch_3 = make_dataset(remote_1k, tmp_path)
    epoch_3.set_epoch(3)
    assert handed == ids_of(epoch_3)
    assert after != handed and sorted(after) == sorted(handed)  # the next epoch, every sample once


def test_handing_over_reaches_workers_started_inside_the_block(remote_1k: Path, tmp_path: Path) -> None:
    dataset = make_dataset(remote_1k, tmp_path)
    plan = dataset.begin_pass().plan
    with dataset.handing_over(plan, replay=True):
        worker_copy = pickle.loads(pickle.dumps(dataset))  # what a spawned worker receives
    assert dataset._cursor.handoff is None  # nothing lingers for readers started later
    assert worker_copy._cursor.handoff is not None and worker_copy._cursor.handoff.plan == plan
    assert worker_copy._cursor.handoff.replay


def test_finish_pass_ends_the_epoch(remote_1k: Path, tmp_path: Path) -> None:
    dataset = make_dataset(remote_1k, tmp_path)
    plan = dataset.begin_pass().plan
    assert dataset.state_dict(0)["epoch"] == 0
    dataset.finish_pass(plan)
    assert dataset.state_dict(0)["epoch"] == 1


class RewindingLoader(StreamingDataLoader):
    def workers_should_replay(self, plan: Any) -> bool:
        return True


def test_workers_should_replay_hook_keeps_persistent_workers_across_rewinds(remote_1k: Path, tmp_path: Path) -> None:
    dataset = make_dataset(remote_1k, tmp_path)
    loader = RewindingLoader(dataset, batch_size=BATCH, num_workers=2, persistent_workers=True)
    passes, iterators = [], []
    for _ in range(3):
        dataset.set_epoch(0)
        passes.append([int(i) for batch in loader for i in batch["id"]])
        iterators.append(id(loader._iterator))
    assert passes[0] == passes[1] == passes[2] and sorted(passes[0]) == list(range(1000))
    assert len(set(iterators)) == 1  # started once, replaying epoch 0


def test_real_samples_outside_a_pass_is_refused(remote_1k: Path, tmp_path: Path) -> None:
    loader = StreamingDataLoader(make_dataset(remote_1k, tmp_path), batch_size=BATCH)
    with pytest.raises(ConfigError, match="expected a pass in progress over a StreamingDataset, found none"):
        loader.real_samples(0)


def add_thousand(sample: dict[str, Any]) -> dict[str, Any]:
    return {**sample, "id": int(sample["id"]) + 1000}


def test_transform_applies_to_iteration_and_to_random_access(remote_1k: Path, tmp_path: Path) -> None:
    plain = make_dataset(remote_1k, tmp_path / "a")
    transformed = make_dataset(remote_1k, tmp_path / "b", transform=add_thousand)
    assert ids_of(transformed) == [i + 1000 for i in ids_of(plain)]
    assert transformed[5]["id"] == plain[5]["id"] + 1000
    loader = StreamingDataLoader(transformed, batch_size=BATCH, num_workers=2)
    assert sorted(int(i) for batch in loader for i in batch["id"]) == list(range(1000, 2000))


def test_transform_must_be_callable(remote_1k: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigTypeError, match="transform: expected a function of one sample, or None, found int"):
        make_dataset(remote_1k, tmp_path, transform=3)


class Doubling(StreamingDataset):
    """MosaicML's way to transform samples: override get_item and call super()."""

    def get_item(self, sample_id: int) -> Any:
        sample = super().get_item(sample_id)
        return {**sample, "id": int(sample["id"]) * 2}


class Peeking(StreamingDataset):
    """An override that reads another sample before its own: still the right data."""

    def get_item(self, sample_id: int) -> Any:
        neighbour = super().get_item((sample_id + 1) % self.num_samples)
        return {"id": int(super().get_item(sample_id)["id"]), "next": int(neighbour["id"])}


def test_a_get_item_override_calling_super_yields_the_same_samples(remote_1k: Path, tmp_path: Path) -> None:
    plain = ids_of(make_dataset(remote_1k, tmp_path / "a"))
    overridden = Doubling(remote=f"file://{remote_1k}", local=str(tmp_path / "b"), batch_size=BATCH, shuffle=True, num_canonical_nodes=2)
    assert ids_of(overridden) == [2 * i for i in plain]
    peeking = Peeking(remote=f"file://{remote_1k}", local=str(tmp_path / "c"), batch_size=BATCH, shuffle=True, num_canonical_nodes=2)
    samples = list(peeking)
    assert [s["id"] for s in samples] == plain
    assert all(s["next"] == (s["id"] + 1) % 1000 for s in samples)


def test_negative_and_array_indexes_still_work_on_an_overriding_subclass(remote_1k: Path, tmp_path: Path) -> None:
    dataset = Doubling(remote=f"file://{remote_1k}", local=str(tmp_path), batch_size=BATCH)
    assert dataset[-1]["id"] == 2 * 999
    assert [s["id"] for s in dataset[np.array([3, 4])]] == [6, 8]
    first = next(iter(dataset))
    assert dataset[-1]["id"] == 2 * 999 and first["id"] == 0
