"""Composer's torch (2.7.0 in .venv-composer) is one the faster DataLoader hand-off was checked with: the
gate lets it through, and the piped iterator, with its shared region, gives torch's batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from stream_plugin import StreamingDataLoader
from stream_plugin.reading.torch_internals import CHECKED_TORCH_VERSIONS, make_iterator, torch_iterator_reason
from stream_plugin.reading.torch_internals.gate import torch_release
from stream_plugin.reading.torch_internals.worker_pipes import PipedWorkersIterator
from stream_plugin.reading.transport import SHARED_BYTES_MIN


class _Payloads(IterableDataset):
    """Worker ``w`` yields samples ``w, w + 2, ...`` with a payload large enough for the shared region."""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker = 0 if info is None else info.id
        for index in range(worker, 16, 2):
            yield {"id": index, "data": bytes([index]) * (SHARED_BYTES_MIN // 4)}


def _collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": torch.tensor([sample["id"] for sample in samples]),
        "data": [sample["data"] for sample in samples],
    }


def _batches(loader: Any) -> list[tuple[list[int], list[bytes]]]:
    return [(batch["id"].tolist(), batch["data"]) for batch in loader]


def test_composers_torch_passes_the_gate_and_takes_the_piped_iterator() -> None:
    assert torch_release() in CHECKED_TORCH_VERSIONS, torch.__version__
    loader = StreamingDataLoader(
        _Payloads(), batch_size=4, num_workers=2, collate_fn=_collate, multiprocessing_context="fork"
    )
    assert torch_iterator_reason(loader, environ={}) is None
    iterator = make_iterator(loader)
    assert isinstance(iterator, PipedWorkersIterator) and iterator.region is not None
    expected = _batches(DataLoader(_Payloads(), batch_size=4, num_workers=2, collate_fn=_collate))
    assert _batches(iterator) == expected
    assert len(expected) == 4
