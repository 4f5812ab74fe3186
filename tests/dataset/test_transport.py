"""The worker-to-main hand-off (stream_plugin.reading.transport): batches arrive exactly as collated."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import sys
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import IterableDataset

from stream_plugin import StreamingDataLoader, StreamingDataset
from stream_plugin.reading import dataset as dataset_module
from stream_plugin.reading import transport
from stream_plugin.reading.torch_internals import make_iterator
from stream_plugin.reading.torch_internals.iterators import widen_result_pipe
from stream_plugin.reading.torch_internals.worker_pipes import RESULT_PIPE_BYTES, PipedWorkersIterator
from stream_plugin.reading.transport import (
    SHARED_BYTES_MIN,
    SMALL_TENSOR_BYTES,
    BytesInRegion,
    PackedCollate,
    RegionBatch,
    SharedRegion,
)

_NEEDS_MEMFD = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd_create is Linux's")


def _payload(index: int, size: int) -> bytes:
    return np.random.default_rng(index).integers(0, 256, size, dtype=np.uint8).tobytes()


class _Payloads(IterableDataset):
    """Samples with a payload of ``size`` bytes (different sizes when ``size`` varies by index)."""

    def __init__(self, count: int, size: int) -> None:
        self.count = count
        self.size = size

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for index in range(worker, self.count, workers):
            yield {"id": index, "data": _payload(index, self.size + index % 7)}


def _tensors_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    ids = torch.tensor([sample["id"] for sample in samples])
    return {
        "id": ids,
        "pair": (ids.to(torch.bfloat16), ids % 2 == 0),
        "scalar": ids.sum(),
        "empty": torch.zeros(0, 3),
        "strided": torch.arange(24).reshape(4, 6).t(),
        "large": torch.ones(SMALL_TENSOR_BYTES // 4 + 1, dtype=torch.float32),
        "nested": [ids * 2, {"inner": ids + 1}],
        "data": [sample["data"] for sample in samples],
    }


def _roundtrip(value: Any) -> Any:
    """What the main process gets: the worker's pickler, then unpickling."""
    return pickle.loads(ForkingPickler.dumps(value))


def _assert_same(found: Any, expected: Any) -> None:
    assert type(found) is type(expected)
    if isinstance(expected, torch.Tensor):
        assert found.dtype == expected.dtype and found.shape == expected.shape
        assert torch.equal(found, expected)
    elif isinstance(expected, dict):
        assert found.keys() == expected.keys()
        for key in expected:
            _assert_same(found[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert len(found) == len(expected)
        for one, other in zip(found, expected):
            _assert_same(one, other)
    else:
        assert found == expected


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_batches_from_workers_arrive_exactly_as_collated(context: str) -> None:
    dataset = _Payloads(count=64, size=300)
    loader = StreamingDataLoader(
        dataset, batch_size=8, num_workers=2, collate_fn=_tensors_collate, multiprocessing_context=context
    )
    received = list(loader)
    assert sorted(index for batch in received for index in batch["id"].tolist()) == list(range(64))
    for batch in received:
        samples = [{"id": index, "data": _payload(index, 300 + index % 7)} for index in batch["id"].tolist()]
        _assert_same(batch, _tensors_collate(samples))


@pytest.mark.parametrize("context", ["fork", "spawn"])  # a shared region, shared blocks
def test_large_bytes_lists_from_workers_arrive_intact(context: str) -> None:
    size = SHARED_BYTES_MIN // 8  # 8 items per batch: each batch goes through shared memory
    loader = StreamingDataLoader(
        _Payloads(count=96, size=size), batch_size=8, num_workers=2, multiprocessing_context=context
    )
    seen = set()
    for batch in loader:
        for index, data in zip(batch["id"].tolist(), batch["data"]):
            assert type(data) is bytes
            assert data == _payload(index, size + index % 7)
            seen.add(index)
    assert seen == set(range(96))


@pytest.mark.skipif(
    not SharedRegion.available(multiprocessing.get_context("fork")), reason="needs fork and memfd"
)
def test_large_batches_from_forked_workers_travel_through_the_loaders_shared_region() -> None:
    size = SHARED_BYTES_MIN // 4
    loader = StreamingDataLoader(
        _Payloads(count=40, size=size), batch_size=4, num_workers=2, multiprocessing_context="fork"
    )
    iterator = make_iterator(loader)
    region = iterator.region  # this iterator's own
    assert isinstance(region, SharedRegion) and loader.collate_fn.region is None
    received = {}
    for _ in range(40 // 4):  # every batch, without ending the pass yet
        batch = next(iterator)
        received.update(zip(batch["id"].tolist(), batch["data"]))
    assert sorted(received) == list(range(40))
    assert all(data == _payload(index, size + index % 7) for index, data in received.items())
    # Its slots still hold the last batches the workers wrote there.
    assert sum(region.memory.find(data) >= 0 for data in received.values()) >= 4
    assert next(iterator, None) is None
    other = make_iterator(loader)
    assert other.region is not None and other.region is not region  # a region per iterator
    del iterator, batch, other
    gc.collect()
    assert region.memory.closed  # gone with its iterator


@pytest.mark.skipif(
    not SharedRegion.available(multiprocessing.get_context("fork")), reason="needs fork and memfd"
)
def test_torchs_iterator_with_forked_workers_gets_a_region_too() -> None:
    size = SHARED_BYTES_MIN // 4
    # in_order=False keeps torch's iterator (the pipes serve torch's in-order round robin only).
    loader = StreamingDataLoader(
        _Payloads(count=16, size=size), batch_size=4, num_workers=2, multiprocessing_context="fork", in_order=False
    )
    iterator = make_iterator(loader)
    assert not isinstance(iterator, PipedWorkersIterator) and isinstance(iterator.region, SharedRegion)
    received = {index: data for batch in iterator for index, data in zip(batch["id"].tolist(), batch["data"])}
    assert received == {index: _payload(index, size + index % 7) for index in range(16)}
    assert sum(iterator.region.memory.find(data) >= 0 for data in received.values()) >= 4


@_NEEDS_MEMFD
def test_a_loader_whose_region_the_system_refuses_sends_large_batches_through_shared_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(transport.os, "memfd_create", refuse)
    assert SharedRegion.for_workers(2, 3, multiprocessing.get_context("fork")) is None
    size = SHARED_BYTES_MIN // 4
    loader = StreamingDataLoader(
        _Payloads(count=16, size=size), batch_size=4, num_workers=2, multiprocessing_context="fork"
    )
    received = {index: data for batch in loader for index, data in zip(batch["id"].tolist(), batch["data"])}
    assert received == {index: _payload(index, size + index % 7) for index in range(16)}


@_NEEDS_MEMFD
def test_a_spawned_worker_gets_no_region() -> None:
    assert not SharedRegion.available(multiprocessing.get_context("spawn"))
    packer = PackedCollate(_tensors_collate)
    packer.region = SharedRegion(workers=1, slots=1, slot_bytes=64)
    try:
        assert pickle.loads(pickle.dumps(packer)).region is None
    finally:
        packer.region.close()


def _received(region: SharedRegion, packed: Any) -> Any:
    """What the iterator that owns ``region`` hands over for a batch its worker packed as ``packed``."""
    return region.receive(_roundtrip(RegionBatch(packed)))


@_NEEDS_MEMFD
def test_region_slots_are_reused_only_after_the_main_process_copied_them_out() -> None:
    region = SharedRegion(workers=2, slots=2, slot_bytes=4096)
    try:
        items = [_payload(index, 100 + index) for index in range(5)]
        first, second = (region.put(0, items, sum(map(len, items))) for _ in range(2))
        assert first is not None and second is not None
        assert region.put(0, items, 10) is None  # both of worker 0's slots are still being read
        other = region.put(1, [b"w1"], 2)  # worker 1 has slots of its own
        assert other is not None and other.ends[0] >= 2 * 4096
        assert _received(region, first) == items  # the main process copies the items out: the slot is free
        again = region.put(0, [b"again"], 5)
        assert again is not None and again.ends[0] == first.ends[0]
        assert _received(region, second) == items and _received(region, other) == [b"w1"]
        assert region.put(1, [b"x" * 4096], 4096) is None  # larger than a slot: another path takes it
    finally:
        region.close()


@_NEEDS_MEMFD
def test_a_region_batch_is_copied_out_through_every_container_the_packer_descends_into() -> None:
    region = SharedRegion(workers=1, slots=4, slot_bytes=4096)
    try:
        items = [[b"a" * 10, b"b" * 20], [b"c" * 30], [b"d"]]
        marks = [region.put(0, part, sum(map(len, part))) for part in items]
        packed = {"data": marks[0], "pair": (marks[1], torch.ones(2)), "lists": [marks[2]], "n": 3}
        found = _received(region, packed)
        _assert_same(found, {"data": items[0], "pair": (items[1], torch.ones(2)), "lists": [items[2]], "n": 3})
        plain = {"data": [b"x"]}
        assert region.receive(plain) is plain  # a batch with nothing in the region is left as it is
        assert isinstance(_roundtrip(marks[0]), BytesInRegion)  # only the region's owner reads its items
    finally:
        region.close()


def test_small_tensor_travels_by_value_inside_the_pickle() -> None:
    packer = PackedCollate(lambda batch: batch)
    tensor = torch.arange(10, dtype=torch.int64)
    packed = packer._pack({"id": tensor})
    assert isinstance(packed["id"], transport._TensorByValue)
    _, arguments = packed["id"].__reduce__()
    assert arguments[0] == tensor.numpy().tobytes()
    _assert_same(_roundtrip(packed), {"id": tensor})


def test_strided_views_travel_by_value_including_one_element_ones() -> None:
    packer = PackedCollate(lambda batch: batch)
    rows = torch.arange(3 * 17).reshape(3, 17)
    views = {"column": rows[:, 0], "one": rows[:1, 0], "transposed": rows.t()[:4]}
    assert views["one"].stride() == (17,)  # one element, yet not stride 1
    _assert_same(_roundtrip(packer._pack(views)), {key: view.clone() for key, view in views.items()})


def test_tensors_that_cannot_travel_by_value_keep_torchs_path() -> None:
    packer = PackedCollate(lambda batch: batch)
    large = torch.zeros(SMALL_TENSOR_BYTES + 1, dtype=torch.uint8)
    tracked = torch.zeros(3, requires_grad=True)
    packed = packer._pack({"large": large, "tracked": tracked, "text": ["a", "b"], "number": 3})
    assert packed["large"] is large and packed["tracked"] is tracked
    assert packed["text"] == ["a", "b"] and packed["number"] == 3


def test_shared_block_is_reused_only_after_the_main_process_copied_it_out() -> None:
    packer = PackedCollate(lambda batch: batch)
    items = [_payload(index, SHARED_BYTES_MIN // 4) for index in range(4)]
    first = packer._pack(items)
    assert isinstance(first, transport._BytesInBlock)
    # Not yet unpickled by the main process: the next batch must not overwrite it.
    second = packer._pack(items)
    assert second.block.data_ptr() != first.block.data_ptr()
    assert _roundtrip(first) == items
    third = packer._pack(list(reversed(items)))
    assert third.block.data_ptr() == first.block.data_ptr()
    assert _roundtrip(third) == list(reversed(items))
    assert _roundtrip(second) == items


def test_pool_stays_bounded_when_the_main_process_falls_behind() -> None:
    packer = PackedCollate(lambda batch: batch)
    items = [_payload(0, SHARED_BYTES_MIN)]
    in_flight = [packer._pack(items) for _ in range(transport.POOLED_BLOCKS + 3)]
    assert len(packer._pool.blocks) == transport.POOLED_BLOCKS
    assert all(_roundtrip(packed) == items for packed in in_flight)


def test_small_bytes_lists_and_mixed_lists_pass_unchanged() -> None:
    packer = PackedCollate(lambda batch: batch)
    small = [b"x" * 10, b"y" * 10]
    mixed = [b"x" * SHARED_BYTES_MIN, "not bytes"]
    assert packer._pack(small) is small
    assert packer._pack(mixed) is mixed


def test_main_process_batches_pass_unchanged() -> None:
    loader = StreamingDataLoader(_Payloads(count=4, size=SHARED_BYTES_MIN), batch_size=4)
    (batch,) = list(loader)
    assert type(batch["id"]) is torch.Tensor and type(batch["data"]) is list
    assert batch["data"][3] == _payload(3, SHARED_BYTES_MIN + 3)


def test_collate_fn_is_wrapped_once_and_keeps_the_users_function() -> None:
    loader = StreamingDataLoader(_Payloads(count=4, size=4), batch_size=2, collate_fn=_tensors_collate)
    assert isinstance(loader.collate_fn, PackedCollate)
    assert loader.collate_fn.collate is _tensors_collate
    again = StreamingDataLoader(loader.dataset, batch_size=2, collate_fn=loader.collate_fn)
    assert again.collate_fn.collate is _tensors_collate


_HEAP_KEPT: list[bool] = []


def _report_heap(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": torch.tensor([sample["id"] for sample in samples]), "kept": list(_HEAP_KEPT)}


def test_workers_and_the_main_process_settle_their_heaps_when_they_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transport, "settle_heap", lambda *, in_worker: _HEAP_KEPT.append(in_worker) or True)
    in_worker = list(
        StreamingDataLoader(_Payloads(8, 4), batch_size=4, num_workers=1, collate_fn=_report_heap)
    )
    assert [batch["kept"] for batch in in_worker] == [[True], [True]]  # once per worker process


def _report_settled(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": torch.tensor([sample["id"] for sample in samples]), "settled": list(_HEAP_KEPT)}


def test_a_streaming_dataset_settles_the_heap_of_the_process_that_reads_it(
    monkeypatch: pytest.MonkeyPatch, remote_1k: Path, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        dataset_module, "settle_heap", lambda *, in_worker: _HEAP_KEPT.append(in_worker) or True
    )
    _HEAP_KEPT.clear()
    dataset = StreamingDataset(local=str(remote_1k), batch_size=500)
    in_main = list(StreamingDataLoader(dataset, batch_size=500, collate_fn=_report_settled))
    assert [batch["settled"] for batch in in_main] == [[False], [False]]  # the main process's policy
    _HEAP_KEPT.clear()
    dataset = StreamingDataset(local=str(remote_1k), batch_size=500)
    in_worker = list(StreamingDataLoader(dataset, batch_size=500, num_workers=1, collate_fn=_report_settled))
    assert [batch["settled"] for batch in in_worker] == [[True], [True]]  # the worker's, in the worker


@pytest.mark.skipif(sys.platform != "linux", reason="pipe sizes are Linux's")
@pytest.mark.parametrize("path", ["pipes", "torch"])
def test_the_workers_result_pipe_holds_a_whole_batch(remote_1k: Path, path: str) -> None:
    import fcntl

    # in_order=False keeps torch's iterator (one result queue for all workers), which is widened.
    options = {} if path == "pipes" else {"in_order": False}
    loader = StreamingDataLoader(
        StreamingDataset(local=str(remote_1k), batch_size=100), batch_size=100, num_workers=1, **options
    )
    iterator = make_iterator(loader)
    try:
        if path == "pipes":
            assert isinstance(iterator, PipedWorkersIterator)
            fd = iterator._receivers[0].fd
        else:
            assert not isinstance(iterator, PipedWorkersIterator)
            fd = iterator._worker_result_queue._reader.fileno()
        assert fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) >= min(
            RESULT_PIPE_BYTES, int(Path("/proc/sys/fs/pipe-max-size").read_text())
        )
        assert len(next(iterator)["id"]) == 100
    finally:
        iterator._shutdown_workers()


def test_widen_result_pipe_leaves_an_iterator_without_one_alone() -> None:
    assert widen_result_pipe(object()) == 0
    assert widen_result_pipe(iter(StreamingDataLoader(_Payloads(4, 4), batch_size=2))) == 0  # no workers
