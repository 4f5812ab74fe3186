"""Cheaper hand-off of batches from DataLoader workers to the main process.

A worker's batch reaches the main process pickled through a pipe. torch moves each tensor in it into a
new shared-memory segment whose file descriptor the main process then fetches over a socket handshake
(about 0.3 ms per tensor: more than reading 256 small samples), and ``bytes`` payloads travel inside
the pickle, copied four times on the way. ``PackedCollate`` wraps the loader's collate function and,
in a worker only, rewrites the batch just before it is pickled:

- a small CPU tensor travels by value, inside the pickle;
- a list of ``bytes`` that is large in total travels through a shared block that the worker reuses:
  the main process copies the items out while unpickling and then marks the block free.

The main process receives the very objects the collate function returned (plain tensors, lists of
``bytes``); nothing outside this module sees the packed forms. Anything else passes through torch's
own path unchanged. On its first batch, a worker also keeps freed heap memory for the next batch
(``stream_plugin.reading.heap``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from stream_plugin.reading.heap import settle_heap

RESULT_PIPE_BYTES = 1 << 20  # the workers' result pipe holds a whole pickled batch (Linux's default cap)
SMALL_TENSOR_BYTES = 64 * 1024  # tensors up to this size travel inside the pickle
SHARED_BYTES_MIN = 1 << 20  # lists of bytes from this total size travel through a shared block
POOLED_BLOCKS = 4  # per worker: a batch in flight per prefetch slot (prefetch_factor=2), plus slack

_FREE = 0
_BUSY = 1
_HEADER = 8  # byte 0 of a block says whether the main process still has to copy out of it


def _tensor_from_bytes(data: bytes, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)


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
    storage = torch.UntypedStorage._new_shared(size)
    return torch.empty(0, dtype=torch.uint8).set_(storage)


class PackedCollate:
    """The loader's collate function, with batches packed for the trip to the main process in workers.

    ``collate`` is the wrapped function. In the main process (``num_workers=0``) batches pass unchanged.
    """

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate
        self._pool = _BlockPool()
        self._worker_ready = False

    def __call__(self, samples: Any) -> Any:
        if get_worker_info() is None:
            return self.collate(samples)
        if not self._worker_ready:
            settle_heap(in_worker=True)
            self._worker_ready = True
        return self._pack(self.collate(samples))

    def __getstate__(self) -> dict[str, Any]:
        return {"collate": self.collate}  # a spawned worker starts with its own empty pool

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.collate = state["collate"]
        self._pool = _BlockPool()
        self._worker_ready = False

    def _pack(self, value: Any) -> Any:
        kind = type(value)
        if kind is torch.Tensor:
            return _TensorByValue(value) if _travels_by_value(value) else value
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

    def _pack_bytes(self, items: list[Any]) -> Any:
        # C-level checks: a batch of small samples (the common case) passes through at once.
        if set(map(type, items)) != {bytes}:
            return items
        total = sum(map(len, items))
        if total < SHARED_BYTES_MIN:
            return items
        sizes = np.fromiter(map(len, items), np.int64, len(items))
        ends = (np.cumsum(sizes) + _HEADER).tolist()
        block = self._pool.take(_HEADER + total)
        array = block.numpy()
        start = _HEADER
        for item, end in zip(items, ends):
            array[start:end] = np.frombuffer(item, np.uint8)
            start = end
        return _BytesInBlock(block, ends)


def _travels_by_value(tensor: torch.Tensor) -> bool:
    return (
        tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and not tensor.requires_grad
        and not tensor.is_quantized
        and not tensor.is_conj()
        and not tensor.is_neg()
        and tensor.numel() * tensor.element_size() <= SMALL_TENSOR_BYTES
    )


def widen_result_pipe(iterator: Any, size: int = RESULT_PIPE_BYTES) -> int:
    """Let the pipe that carries workers' batches to the main process hold ``size`` bytes; its new size
    in bytes, or 0 where it cannot be changed (not Linux, no such pipe, or the system's limits).

    A pipe holds 64 KiB by default, so a batch of 256 x 1 KiB samples (a 262 KB pickle, below
    ``SHARED_BYTES_MIN``) crosses it in at least four rounds of a blocked write in the worker and a read
    in the main process, each a pair of context switches. In one write it arrives about 1.3x faster.
    """
    queue = getattr(iterator, "_worker_result_queue", None)
    reader = getattr(queue, "_reader", None)
    if reader is None or not hasattr(reader, "fileno"):
        return 0
    try:
        import fcntl

        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        return int(fcntl.fcntl(reader.fileno(), fcntl.F_SETPIPE_SZ, min(size, limit)))
    except (ImportError, AttributeError, OSError, ValueError):  # not Linux, or over the user's pipe quota
        return 0
