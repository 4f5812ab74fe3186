"""Token streams whose every token names its own position, so a block's first token names the block.

Stream ``s`` holds tokens ``base, base + 1, ...`` (``base = s * STREAM_BASE``) cut into samples of 1 to
``max_length`` tokens; with ``block_size`` B, the block that starts with token ``t`` is block
``(t - base) // B`` of its stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stream_plugin import MDSWriter, Stream, World
from stream_plugin.text import StreamingTokenBlockDataset

STREAM_BASE = 1_000_000
BLOCK = 16  # the tests' block size


def token_block_dataset(streams: Sequence[Stream] | None = None, **kwargs: Any) -> StreamingTokenBlockDataset:
    """A shuffled ``StreamingTokenBlockDataset`` of ``BLOCK``-token blocks, batch 8, 2 canonical nodes, one
    rank; ``kwargs`` override any of those or add arguments."""
    arguments: dict[str, Any] = {
        "block_size": BLOCK,
        "batch_size": 8,
        "shuffle": True,
        "num_canonical_nodes": 2,
        "world": World(rank=0, world_size=1),
    }
    arguments.update(kwargs)
    return StreamingTokenBlockDataset(streams=streams, **arguments)


def sample_lengths(num_samples: int, max_length: int = 23, seed: int = 0) -> list[int]:
    """Deterministic lengths in ``[1, max_length]`` (ragged, so blocks cross sample and shard ends)."""
    return [1 + (i * 7 + seed * 3) % max_length for i in range(num_samples)]


def write_token_stream(
    folder: Path,
    num_samples: int,
    *,
    base: int = 0,
    encoding: str = "ndarray:int32",
    column: str = "tokens",
    size_limit: int = 1 << 9,
    compression: str | None = None,
) -> np.ndarray:
    """Write the stream; returns all its tokens in stored order (the flat stream)."""
    tokens = []
    position = base
    with MDSWriter(
        out=str(folder), columns={column: encoding}, size_limit=size_limit, compression=compression
    ) as writer:
        for length in sample_lengths(num_samples, seed=base // STREAM_BASE):
            row = np.arange(position, position + length, dtype=np.int32)
            position += length
            tokens.append(row)
            stored = {"bytes": row.tobytes(), "json": row.tolist()}.get(encoding, row)
            writer.write({column: stored})
    return np.concatenate(tokens).astype(np.int64)


def collate_with_ids(items: list[torch.Tensor]) -> dict[str, Any]:
    """Stack blocks; ``id`` is each block's first token (its position in its stream, plus the base)."""
    blocks = torch.stack(items)
    return {"id": blocks[:, 0].clone(), "tokens": blocks}
