"""Tensors from forked DataLoader workers travel through the iterator's shared region: each batch's
tensors (and lists of bytes) in one slot, copied out exactly, the slot freed once copied."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import IterableDataset

from stream_plugin import StreamingDataLoader
from stream_plugin.reading.torch_internals import make_iterator
from stream_plugin.reading.transport import REGION_TENSOR_BYTES, SharedRegion

pytestmark = pytest.mark.skipif(
    not SharedRegion.available(multiprocessing.get_context("fork")), reason="needs fork and memfd"
)
BATCH = 4
BATCHES = 12


class _Indices(IterableDataset):
    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        return iter(range(worker, BATCH * BATCHES, workers))


def _collate(indices: list[int]) -> dict[str, Any]:
    """Tensors of several dtypes and layouts, all but ``ids`` over ``REGION_TENSOR_BYTES``."""
    ids = torch.tensor(indices, dtype=torch.int64)
    blocks = (ids[:, None] * 10_000 + torch.arange(2049)).to(torch.int32)  # (4, 2049): token blocks
    return {
        "ids": ids,
        "blocks": blocks,
        "mask": blocks % 3 == 0,
        "half": (blocks[0] / 7).to(torch.bfloat16),
        "transposed": blocks.to(torch.int64).t()[:600],  # not contiguous
        "list": [blocks[1].to(torch.float64), blocks[2].to(torch.int16)],
        "data": [bytes([index]) * 300_000 for index in indices],
    }


def _assert_same(found: Any, expected: Any) -> None:
    assert type(found) is type(expected)
    if isinstance(expected, torch.Tensor):
        assert (
            found.dtype == expected.dtype and found.shape == expected.shape and torch.equal(found, expected)
        )
    elif isinstance(expected, dict):
        assert found.keys() == expected.keys()
        for key in expected:
            _assert_same(found[key], expected[key])
    elif isinstance(expected, list):
        assert len(found) == len(expected)
        for one, other in zip(found, expected):
            _assert_same(one, other)
    else:
        assert found == expected


def test_tensor_batches_from_forked_workers_arrive_exactly_through_one_region_slot_each() -> None:
    loader = StreamingDataLoader(
        _Indices(), batch_size=BATCH, num_workers=2, collate_fn=_collate, multiprocessing_context="fork"
    )
    iterator = make_iterator(loader)
    region = iterator.region
    assert isinstance(region, SharedRegion)
    batches = [next(iterator) for _ in range(BATCHES)]
    for batch in batches:
        _assert_same(batch, _collate(batch["ids"].tolist()))
    # The last batch's tensors came through the region, all in one slot of its worker.
    last = batches[-1]
    found = [
        region.memory.find(tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        for tensor in (last["blocks"], last["half"])
    ]
    assert all(at >= 0 for at in found)
    assert len({at // region.slot_bytes for at in found}) == 1
    assert last["half"].numel() * 2 >= REGION_TENSOR_BYTES
    # Every slot was freed once its batch was copied out.
    slots = range(0, len(region.memory), region.slot_bytes)
    assert all(region.memory[slot] == 0 for slot in slots)
    assert next(iterator, None) is None


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint16])
def test_token_block_batches_of_every_size_arrive_exactly(dtype: torch.dtype) -> None:
    def collate(indices: list[int]) -> torch.Tensor:
        return torch.stack([torch.full((2049,), index, dtype=dtype) for index in indices])

    for batch_size in (1, 8, 32):
        loader = StreamingDataLoader(
            _Indices(),
            batch_size=batch_size,
            num_workers=2,
            collate_fn=collate,
            multiprocessing_context="fork",
        )
        seen: list[int] = []
        for batch in loader:
            assert batch.dtype == dtype and batch.shape[1] == 2049
            assert all(bool((row == row[0]).all()) for row in batch)
            seen.extend(int(row[0]) for row in batch)
        assert sorted(seen) == list(range(BATCH * BATCHES))
