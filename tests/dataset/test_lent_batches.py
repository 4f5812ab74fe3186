"""Large batches of tensors from forked workers are stacked into the iterator's shared region and lent to
the caller as views: no copy, no new shared-memory segment per batch, the slot taken until let go."""

from __future__ import annotations

import gc
import multiprocessing
import pickle
from collections.abc import Iterator

import pytest
import torch
from torch.utils.data import IterableDataset

from stream_plugin import StreamingDataLoader
from stream_plugin.reading.torch_internals import make_iterator
from stream_plugin.reading.transport import (
    REGION_TENSOR_MAX_BYTES,
    RegionBatch,
    SharedRegion,
    TensorInRegion,
)

pytestmark = pytest.mark.skipif(
    not SharedRegion.available(multiprocessing.get_context("fork")), reason="needs fork and memfd"
)
BATCH = 16
BATCHES = 24
SHAPE = (3, 96, 96)  # float32 or int32: 108 KiB a sample, 1.7 MiB a batch of 16


class _Images(IterableDataset):
    """Sample i: (an image of value i, an int32 image of value 2i, label i), split between the workers;
    each image column of a batch is over ``REGION_TENSOR_MAX_BYTES``."""

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for index in range(worker, BATCH * BATCHES, workers):
            yield torch.full(SHAPE, float(index)), torch.full(SHAPE, index, dtype=torch.int32) * 2, index


def _loader() -> StreamingDataLoader:
    return StreamingDataLoader(_Images(), batch_size=BATCH, num_workers=2, multiprocessing_context="fork")


def _expected(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.stack([torch.full(SHAPE, float(index)) for index in labels.tolist()])
    return images, torch.stack([torch.full(SHAPE, index, dtype=torch.int32) * 2 for index in labels.tolist()])


def test_a_large_batch_of_tensors_reaches_the_caller_as_a_view_of_the_region() -> None:
    assert BATCH * 3 * 96 * 96 * 4 > REGION_TENSOR_MAX_BYTES  # each image column is lent
    iterator = make_iterator(_loader())
    region = iterator.region
    assert isinstance(region, SharedRegion)
    seen: list[int] = []
    lent = 0
    for images, doubled, labels in iterator:
        want_images, want_doubled = _expected(labels)
        assert torch.equal(images, want_images) and torch.equal(doubled, want_doubled)
        lent += region.offset_of(images) is not None and region.offset_of(doubled) is not None
        seen += labels.tolist()
        del images, doubled  # let go of the views: their slot is the worker's again
    assert sorted(seen) == list(range(BATCH * BATCHES))
    assert lent == BATCHES  # every batch was lent: each slot came back once its batch was let go


def test_a_kept_batch_is_never_written_over_by_a_later_one() -> None:
    """The caller keeps every batch: the lent slots stay taken, later batches take torch's path, and
    every kept batch still holds its own values at the end."""
    kept = list(_loader())
    assert sorted(label for _, _, labels in kept for label in labels.tolist()) == list(range(BATCH * BATCHES))
    for images, doubled, labels in kept:
        want_images, want_doubled = _expected(labels)
        assert torch.equal(images, want_images) and torch.equal(doubled, want_doubled)


def test_a_lent_slot_is_free_again_only_when_its_last_view_is_gone() -> None:
    region = SharedRegion(workers=1, slots=2, slot_bytes=1 << 21)
    try:
        offset = region.take(0, 4096)
        assert offset is not None
        source = region.tensor_at(offset + 64, torch.float32, (2, 300_000 // 2))
        source[:] = torch.arange(300_000, dtype=torch.float32).reshape(2, -1)
        packed = TensorInRegion(offset + 64, torch.float32, (2, 150_000), offset, lent=True)
        batch = region.receive(pickle.loads(pickle.dumps(RegionBatch({"x": packed}))))
        row = batch["x"][1]  # a view of the lent tensor keeps the slot too
        del batch, source
        gc.collect()
        assert region.memory[offset] == 1  # still lent: a view of it is alive
        assert torch.equal(row, torch.arange(150_000, 300_000, dtype=torch.float32))
        del row
        gc.collect()
        assert region.memory[offset] == 0  # the worker may write its next batch there
    finally:
        region.close()


def test_a_region_closed_while_a_lent_batch_is_kept_leaves_the_batch_readable() -> None:
    """The loader's iterator (and its region) go away while the caller keeps a lent batch."""
    loader = _loader()
    iterator = make_iterator(loader)
    images, _, labels = next(iterator)
    region = iterator.region
    assert region is not None and region.offset_of(images) is not None
    region.close()  # what the iterator's finalizer does
    del iterator, loader
    gc.collect()
    assert torch.equal(images, _expected(labels)[0])
