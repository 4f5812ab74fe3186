"""``LocalDataset``: MosaicML's map-style dataset over shards already on disk."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from support.datasets import write_ids
from torch.utils.data import DataLoader

from stream_plugin import LocalDataset, UnsafeTypeError
from stream_plugin.format.writer import MDSWriter


def test_local_dataset_reads_every_sample_by_index(remote_1k: Path) -> None:
    dataset = LocalDataset(str(remote_1k))
    assert len(dataset) == dataset.num_samples == dataset.size == dataset.size() == 1000
    assert [dataset[i]["id"] for i in (0, 999, -1)] == [0, 999, 999]
    assert [s["id"] for s in dataset[10:13]] == [10, 11, 12]
    assert [s["id"] for s in dataset[np.array([5, 3])]] == [5, 3]
    assert dataset.spanner[999] == (len(dataset.shards) - 1, dataset.shards[-1].samples - 1)
    with pytest.raises(IndexError, match="sample index 1000 is out of range for a dataset of 1000 samples"):
        dataset[1000]


def test_local_dataset_split_reads_the_sub_folder(tmp_path: Path) -> None:
    write_ids(tmp_path / "root" / "val", range(7))
    dataset = LocalDataset(str(tmp_path / "root"), split="val")
    assert (dataset.local, dataset.split, len(dataset)) == (str(tmp_path / "root"), "val", 7)


def test_local_dataset_works_with_dataloader_workers(remote_1k: Path) -> None:
    dataset = LocalDataset(remote_1k)
    dataset[0]  # an open reader must not be pickled to the workers
    assert pickle.loads(pickle.dumps(dataset))[1]["id"] == 1
    loader = DataLoader(dataset, batch_size=100, num_workers=2)
    assert sorted(int(i) for batch in loader for i in batch["id"]) == list(range(1000))


def test_local_dataset_refuses_unsafe_columns_unless_allowed(tmp_path: Path) -> None:
    with MDSWriter(out=str(tmp_path / "pickled"), columns={"obj": "pkl"}) as writer:
        writer.write({"obj": [1, 2]})
    with pytest.raises(UnsafeTypeError, match="pass allow_unsafe_types=True"):
        LocalDataset(str(tmp_path / "pickled"))
    assert LocalDataset(str(tmp_path / "pickled"), allow_unsafe_types=True)[0] == {"obj": [1, 2]}


def test_local_dataset_get_item_can_be_overridden(remote_1k: Path) -> None:
    class Doubled(LocalDataset):
        def get_item(self, sample_id: int) -> int:
            return 2 * int(super().get_item(sample_id)["id"])

    assert Doubled(str(remote_1k))[-1] == 1998
