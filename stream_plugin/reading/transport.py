"""Cheaper hand-off of batches from DataLoader workers to the main process.

A worker's batch reaches the main process pickled through a pipe. torch moves each tensor in it into a
new shared-memory segment whose file descriptor the main process then fetches over a socket handshake
(about 0.3 ms per tensor: more than reading 256 small samples), and ``bytes`` payloads travel inside
the pickle, copied four times on the way. ``PackedCollate`` wraps the loader's collate function and,
in a worker only, rewrites the batch just before it is pickled:

- a CPU tensor travels through the iterator's ``SharedRegion`` where its workers were forked with one
  (from ``REGION_TENSOR_BYTES`` to ``REGION_TENSOR_MAX_BYTES``: the worker copies it into its batch's
  slot, the main process copies it out), else by value inside the pickle when small, else by torch's
  own path;
- a larger batch of tensors is stacked by the worker straight into its region slot
  (``stack_in_region``, which ``loader.collate_zero_copy`` calls), and the main process hands out a
  view of the slot: no copy on either side, and no new shared-memory segment per batch, whose fresh
  pages cost more than the copy (a batch of 64 float images of 224 x 224: 0.57 ms per image into a new
  segment, 0.05 ms into a slot used before). The slot is *lent*: it stays taken until the last tensor
  viewing it is gone, so a caller may keep a batch as long as it likes; a worker whose slots are all
  lent or in flight takes torch's path for that batch;
- a list of ``bytes`` that is large in total (``SHARED_BYTES_MIN``) travels through shared memory:
  a slot of the iterator's ``SharedRegion`` where its workers were forked with one (the worker writes
  the items there and sends only their offsets, the batch marked as a ``RegionBatch``), else a shared
  block that the worker reuses (passed as a tensor, so by torch's file-descriptor handshake). The main
  process copies the items out (a block's while unpickling, a region's when the iterator that owns the
  region receives the batch: ``SharedRegion.receive``) and then marks the slot or block free.

The caller receives the very objects the collate function returned (plain tensors, lists of
``bytes``); nothing outside this module and the iterator sees the packed forms. Anything else passes
through torch's own path unchanged. On its first batch, a worker also keeps freed heap memory for the
next batch (``stream_plugin.reading.heap``).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import mmap
import multiprocessing
import os
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from stream_plugin.reading.heap import settle_heap

SMALL_TENSOR_BYTES = 64 * 1024  # tensors up to this size travel inside the pickle (without a region)
# With a region, tensors from this size travel through it: a batch of 8 token blocks of 2,049 int32 is
# 65,568 bytes, and through torch's path each batch paid a new shared-memory segment and a handshake.
REGION_TENSOR_BYTES = 4096
# Above this a tensor takes torch's path again: the region costs two copies of it (into the slot, out
# of it), torch's one segment and handshake (0.3 ms); a batch of 64 float images of 224 x 224 (38.5 MB)
# cost 0.33 ms more per image in the main process through the region.
REGION_TENSOR_MAX_BYTES = 1 << 20
_ALIGN = 64  # each item of a batch starts at a multiple of this in its slot
SHARED_BYTES_MIN = 1 << 20  # lists of bytes from this total size travel through a shared block
POOLED_BLOCKS = 4  # per worker: a batch in flight per prefetch slot (prefetch_factor=2), plus slack
REGION_SLOT_BYTES = 128 << 20  # the largest batch of bytes a region slot takes (address space, not memory)

_FREE = 0
_BUSY = 1
_packing: PackedCollate | None = None  # in a worker, the collate packing its batch now (see stack_in_region)
_HEADER = 8  # byte 0 of a block says whether the main process still has to copy out of it


def forks_workers(context: Any) -> bool:
    """Whether a loader with this ``multiprocessing_context`` forks its workers (so they inherit what
    the main process made before starting them)."""
    if context is not None:
        return bool(context.get_start_method() == "fork")
    # Not get_start_method(): asked before any is set, it would set the default for good.
    method = multiprocessing.get_start_method(allow_none=True)
    return (method or multiprocessing.get_all_start_methods()[0]) == "fork"


def _tensor_from_bytes(data: bytes, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)


def stack_in_region(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """``torch.stack(tensors)`` written straight into the region slot of the batch a worker is packing,
    for a batch above ``REGION_TENSOR_MAX_BYTES``: it travels as its offset and reaches the caller as a
    view of the slot (lent until the view is gone). None where there is no such slot (the main process,
    a spawned worker, a batch this small, every slot of the worker in use): stack it as usual."""
    packer = _packing
    first = tensors[0]
    if packer is None or packer.region is None or not _plain_cpu(first):
        return None
    size = first.numel() * first.element_size() * len(tensors)
    if size <= REGION_TENSOR_MAX_BYTES:
        return None
    at = packer._region_space(size)
    if at is None:
        return None
    out = packer.region.tensor_at(at, first.dtype, (len(tensors), *first.shape))
    return torch.stack(tensors, out=out)


class _TensorByValue:
    """Pickles a small tensor as its bytes; unpickles as a plain tensor."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __reduce__(self) -> tuple[Callable[..., torch.Tensor], tuple[bytes, torch.dtype, tuple[int, ...]]]:
        tensor = self.tensor
        # contiguous_format, not .contiguous(): a one-element view keeps its stride (say 17) under
        # .contiguous(), and .view(torch.uint8) refuses any last stride but 1.
        flat = tensor.clone(memory_format=torch.contiguous_format).reshape(-1)
        data = flat.view(torch.uint8).numpy().tobytes()
        return _tensor_from_bytes, (data, tensor.dtype, tuple(tensor.shape))


def _bytes_from_block(block: torch.Tensor, ends: list[int]) -> list[bytes]:
    array = block.numpy()
    view = memoryview(array.data)
    items = []
    start = _HEADER
    for end in ends:
        items.append(bytes(view[start:end]))
        start = end
    view.release()
    array[0] = _FREE  # after the copies: the worker may now write the next batch into this block
    return items


class _BytesInBlock:
    """Pickles a list of bytes as a shared block (passed as a tensor) plus the items' end offsets."""

    __slots__ = ("block", "ends")

    def __init__(self, block: torch.Tensor, ends: list[int]) -> None:
        self.block = block
        self.ends = ends

    def __reduce__(self) -> tuple[Callable[..., list[bytes]], tuple[torch.Tensor, list[int]]]:
        return _bytes_from_block, (self.block, self.ends)


class SharedRegion:
    """Memory that one DataLoader iterator shares with the workers it forks after making it.

    Each worker owns ``slots`` slots of ``slot_bytes``; byte 0 of a slot says whether the main process
    still has to copy a batch out of it. A worker writes a batch's ``bytes`` into a free slot of its own
    and pickles only the items' offsets, in a batch marked as a ``RegionBatch``; the iterator that owns
    the region hands each batch it receives to ``receive``, which copies the items out and frees the
    slot. This costs a fraction of passing a shared block: no file descriptor crosses a socket, and
    nothing is mapped per batch (a batch of 1,024 x 1 KiB samples moves about twice as fast). The memory
    is a sparse ``memfd`` file: a page takes memory once a batch has used it, until the region's
    iterator is gone (``close``). No other object of the process can reach a region.
    """

    _made = itertools.count(1)  # names the memfd (as /proc/<pid>/fd shows it), nothing else

    def __init__(self, workers: int, slots: int, slot_bytes: int = REGION_SLOT_BYTES) -> None:
        self.slots = slots
        self.slot_bytes = slot_bytes
        name = f"stream_plugin-batches-{os.getpid()}-{next(SharedRegion._made)}"
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, workers * slots * slot_bytes)
            self.memory = mmap.mmap(fd, workers * slots * slot_bytes)
        finally:
            os.close(fd)
        self._address: int = np.frombuffer(self.memory, np.uint8, 1).ctypes.data  # forked workers share it

    @classmethod
    def for_workers(cls, workers: int, slots: int, context: Any) -> SharedRegion | None:
        """A region for ``workers`` workers started with ``context`` (a ``multiprocessing_context``), or
        None where they cannot share one (not forked, no ``memfd_create``) or the system refuses the
        memory (a file-descriptor or address-space limit): the batches then take the shared blocks."""
        if not cls.available(context):
            return None
        try:
            return cls(workers, slots)
        except OSError:
            return None

    @staticmethod
    def available(context: Any) -> bool:
        """Whether a loader with this ``multiprocessing_context`` can use a region: its workers are
        forked (so they inherit it), on a system with ``memfd_create`` (Linux)."""
        return hasattr(os, "memfd_create") and forks_workers(context)

    def take(self, worker: int, size: int) -> int | None:
        """The offset of a free slot of ``worker``'s for ``size`` bytes, now in use; None if the
        batch is too large or every slot of the worker is still being read."""
        if size > self.slot_bytes - _HEADER:
            return None
        memory = self.memory
        # The first free slot: batches reuse the fewest slots, so the fewest pages take memory.
        for slot in range(worker * self.slots, (worker + 1) * self.slots):
            offset = slot * self.slot_bytes
            if memory[offset] == _FREE:
                memory[offset] = _BUSY
                return offset
        return None

    def put(self, worker: int, items: list[bytes], size: int) -> BytesInRegion | None:
        """``items`` (``size`` bytes in all) written to a free slot of their own, as they travel; None if
        none fits. (A worker's ``PackedCollate`` puts all of a batch's items in one slot instead.)"""
        offset = self.take(worker, size)
        if offset is None:
            return None
        return self.write_bytes(offset + _HEADER, items, slot=offset)

    def write_bytes(self, at: int, items: list[bytes], *, slot: int) -> BytesInRegion:
        """``items`` written from offset ``at`` of slot ``slot`` (taken, with room for them)."""
        memory = self.memory
        memory.seek(at)
        deque(map(memory.write, items), maxlen=0)  # one C-level pass: no Python code per item
        return BytesInRegion(list(itertools.accumulate(map(len, items), initial=at)), slot)

    def tensor_at(self, at: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        """A writable tensor viewing this region's memory from offset ``at`` (aligned for ``dtype``)."""
        count = math.prod(shape) * dtype.itemsize
        memory = np.frombuffer(self.memory, np.uint8, count, at)  # (count,): keeps the map exported
        return torch.from_numpy(memory).view(dtype).reshape(shape)

    def offset_of(self, tensor: torch.Tensor) -> int | None:
        """Where a contiguous ``tensor`` starts in this process's map of the region; None if it lies
        elsewhere."""
        if not tensor.is_contiguous():
            return None
        offset = tensor.data_ptr() - self._address
        size = tensor.numel() * tensor.element_size()
        return offset if offset >= 0 and offset + size <= len(self.memory) else None

    def write_tensor(self, at: int, tensor: torch.Tensor, *, slot: int) -> TensorInRegion:
        """A contiguous copy of ``tensor`` written from offset ``at`` of slot ``slot`` (taken, with room)."""
        flat = tensor.contiguous().reshape(-1).view(torch.uint8)  # (bytes,)
        self.memory[at : at + flat.numel()] = flat.numpy().data
        return TensorInRegion(at, tensor.dtype, tuple(tensor.shape), slot)

    def receive(self, batch: Any) -> Any:
        """``batch`` as its workers collated it: a ``RegionBatch``'s lists of bytes and tensors copied
        out of this region (their slots freed), anything else as it is."""
        if type(batch) is not RegionBatch:
            return batch
        slots: set[int] = set()
        lent: dict[int, np.ndarray] = {}
        received = self._copy_out(batch.batch, slots, lent)
        for slot in slots - lent.keys():  # after the copies: the worker may write its next batch there
            self.memory[slot] = _FREE
        for slot, memory in lent.items():  # once the caller lets go of every view of the slot
            weakref.finalize(memory, self._free, slot)
        return received

    def _free(self, slot: int) -> None:
        if not self.memory.closed:
            self.memory[slot] = _FREE

    def _lent(self, value: TensorInRegion, lent: dict[int, np.ndarray]) -> torch.Tensor:
        """A view of a lent tensor's bytes; every view of one slot shares one array, whose end frees it."""
        memory = lent.get(value.slot)
        if memory is None:
            memory = lent[value.slot] = np.frombuffer(self.memory, np.uint8, self.slot_bytes, value.slot)
        count = math.prod(value.shape) * value.dtype.itemsize
        start = value.offset - value.slot
        return torch.from_numpy(memory[start : start + count]).view(value.dtype).reshape(value.shape)

    def _copy_out(self, value: Any, slots: set[int], lent: dict[int, np.ndarray]) -> Any:
        """``value`` with each ``BytesInRegion`` and ``TensorInRegion`` replaced by what it stands for,
        through the containers that ``PackedCollate._pack`` descends into; their slots added to ``slots``,
        and those lent (a view handed out: ``stack_in_region``) to ``lent``."""
        kind = type(value)
        if kind is TensorInRegion:
            slots.add(value.slot)
            if value.lent:
                return self._lent(value, lent)
            tensor = torch.empty(value.shape, dtype=value.dtype)
            flat = tensor.reshape(-1).view(torch.uint8).numpy()  # (bytes,)
            flat[:] = np.frombuffer(self.memory, np.uint8, len(flat), value.offset)
            return tensor
        if kind is BytesInRegion:
            slots.add(value.slot)
            ends = value.ends
            return list(map(self.memory.__getitem__, map(slice, ends[:-1], ends[1:])))
        if kind is dict:
            return {key: self._copy_out(item, slots, lent) for key, item in value.items()}
        if kind is tuple:
            return tuple(self._copy_out(item, slots, lent) for item in value)
        if kind is list and value and type(value[0]) in (BytesInRegion, TensorInRegion, dict, list, tuple):
            return [self._copy_out(item, slots, lent) for item in value]
        return value

    def close(self) -> None:
        """Unmap the region: its iterator, and so the workers writing to it, are gone. While the caller
        still holds a lent batch, the map stays until the last view of it is gone."""
        with contextlib.suppress(BufferError):
            self.memory.close()


class BytesInRegion:
    """A list of bytes that a worker wrote to a region slot, as it travels: the items' end offsets
    (``ends[0]`` is where the first item starts) and the slot's offset (by default the one ``ends[0]``
    starts). Only the region's ``receive`` reads it."""

    __slots__ = ("ends", "slot")

    def __init__(self, ends: list[int], slot: int | None = None) -> None:
        self.ends = ends
        self.slot = ends[0] - _HEADER if slot is None else slot

    def __reduce__(self) -> tuple[type[BytesInRegion], tuple[list[int], int]]:
        return BytesInRegion, (self.ends, self.slot)


class TensorInRegion:
    """A tensor that a worker wrote to a region slot, as it travels: where its bytes start, its dtype and
    shape, the slot's offset, and whether the slot is lent (the caller gets a view of it, not a copy).
    Only the region's ``receive`` reads it."""

    __slots__ = ("dtype", "lent", "offset", "shape", "slot")

    def __init__(
        self, offset: int, dtype: torch.dtype, shape: tuple[int, ...], slot: int, lent: bool = False
    ) -> None:
        self.offset = offset
        self.dtype = dtype
        self.shape = shape
        self.slot = slot
        self.lent = lent

    def __reduce__(
        self,
    ) -> tuple[type[TensorInRegion], tuple[int, torch.dtype, tuple[int, ...], int, bool]]:
        return TensorInRegion, (self.offset, self.dtype, self.shape, self.slot, self.lent)


class RegionBatch:
    """A packed batch with parts in its workers' ``SharedRegion`` (``BytesInRegion``), as it travels to
    the iterator that owns the region; its ``receive`` turns it back into the collated batch."""

    __slots__ = ("batch",)

    def __init__(self, batch: Any) -> None:
        self.batch = batch

    def __reduce__(self) -> tuple[type[RegionBatch], tuple[Any]]:
        return RegionBatch, (self.batch,)


class _BlockPool:
    """A worker's shared blocks, reused once the main process has copied a batch out of them."""

    def __init__(self) -> None:
        self.blocks: list[torch.Tensor] = []

    def take(self, size: int) -> torch.Tensor:
        free_but_small = None
        for index, block in enumerate(self.blocks):
            array = block.numpy()
            if array[0] == _FREE:
                if len(array) >= size:
                    array[0] = _BUSY
                    return block
                free_but_small = index
        block = _new_shared_block(size)
        if len(self.blocks) < POOLED_BLOCKS:
            self.blocks.append(block)
        elif free_but_small is not None:  # batches grew: keep the larger block instead
            self.blocks[free_but_small] = block
        # Otherwise every pooled block is still being read: this one travels once and is dropped.
        block.numpy()[0] = _BUSY
        return block


def _new_shared_block(size: int) -> torch.Tensor:
    return torch.empty(size, dtype=torch.uint8).share_memory_()


class PackedCollate:
    """The loader's collate function, with batches packed for the trip to the main process in workers.

    ``collate`` is the wrapped function. In the main process (``num_workers=0``) batches pass unchanged.
    """

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate
        self._pool = _BlockPool()
        self._worker_ready = False
        self._slot: int | None = None  # the region slot of the batch being packed, once it has one
        self._cursor = 0  # where its next item goes in that slot
        # Set by the iterator just before it forks its workers, which keep it; unset in the main process.
        self.region: SharedRegion | None = None

    def __call__(self, samples: Any) -> Any:
        if get_worker_info() is None:
            return self.collate(samples)
        if not self._worker_ready:
            settle_heap(in_worker=True)
            self._worker_ready = True
        self._slot = None
        global _packing
        _packing = self  # the collate may stack into this batch's region slot (stack_in_region)
        try:
            collated = self.collate(samples)
        finally:
            _packing = None
        packed = self._pack(collated)
        return packed if self._slot is None else RegionBatch(packed)

    def __getstate__(self) -> dict[str, Any]:
        return {"collate": self.collate}  # a spawned worker starts with its own empty pool, no region

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.collate = state["collate"]
        self._pool = _BlockPool()
        self._worker_ready = False
        self._slot = None
        self._cursor = 0
        self.region = None

    def _pack(self, value: Any) -> Any:
        kind = type(value)
        if kind is torch.Tensor:
            if not _plain_cpu(value):
                return value
            size = value.numel() * value.element_size()
            if size > REGION_TENSOR_MAX_BYTES and self.region is not None and self._slot is not None:
                offset = self.region.offset_of(value)  # stacked into this batch's slot: lent as it is
                if offset is not None:
                    return TensorInRegion(offset, value.dtype, tuple(value.shape), self._slot, lent=True)
            if REGION_TENSOR_BYTES <= size <= REGION_TENSOR_MAX_BYTES:
                at = self._region_space(size)
                if at is not None:
                    assert self.region is not None and self._slot is not None
                    return self.region.write_tensor(at, value, slot=self._slot)
            return _TensorByValue(value) if size <= SMALL_TENSOR_BYTES else value
        if kind is dict:
            return {key: self._pack(item) for key, item in value.items()}
        if kind is tuple:
            return tuple(self._pack(item) for item in value)
        if kind is list and value:
            first = type(value[0])
            if first is bytes:
                return self._pack_bytes(value)
            if first in (torch.Tensor, dict, list, tuple):
                return [self._pack(item) for item in value]
        return value

    def _region_space(self, size: int) -> int | None:
        """Where the batch being packed may write ``size`` more bytes in its region slot (taken at its
        first item): None without a region, or when the slot is full or none is free."""
        region, info = self.region, get_worker_info()
        if region is None or info is None:
            return None
        if self._slot is None:
            slot = region.take(info.id, size)
            if slot is None:
                return None
            self._slot, self._cursor = slot, slot + _HEADER
        at = -(-self._cursor // _ALIGN) * _ALIGN
        if at + size > self._slot + region.slot_bytes:
            return None
        self._cursor = at + size
        return at

    def _pack_bytes(self, items: list[Any]) -> Any:
        # C-level checks: a batch of small samples (the common case) passes through at once.
        if set(map(type, items)) != {bytes}:
            return items
        total = sum(map(len, items))
        if total < SHARED_BYTES_MIN:
            return items
        at = self._region_space(total)
        if at is not None:
            assert self.region is not None and self._slot is not None
            return self.region.write_bytes(at, items, slot=self._slot)
        sizes = np.fromiter(map(len, items), np.int64, len(items))
        ends = (np.cumsum(sizes) + _HEADER).tolist()
        block = self._pool.take(_HEADER + total)
        array = block.numpy()
        start = _HEADER
        for item, end in zip(items, ends):
            array[start:end] = np.frombuffer(item, np.uint8)
            start = end
        return _BytesInBlock(block, ends)


def _plain_cpu(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s values are all it carries (so its bytes can travel instead of it)."""
    return (
        tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and not tensor.requires_grad
        and not tensor.is_quantized
        and not tensor.is_conj()
        and not tensor.is_neg()
    )
