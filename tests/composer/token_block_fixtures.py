"""Token-block data for the Composer tests: documents of 3 to 25 tokens over several small MDS shards
(blocks span documents and shard boundaries), and the blocks written out the slow, obvious way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from stream_plugin import MDSWriter

NUM_DOCUMENTS = 120
MAX_SEQ_LEN = 16  # llm-foundry's key: a block is 16 tokens, 15 inputs and the label of the last
BLOCK_SIZE = MAX_SEQ_LEN - 1
EOS, BOS = 2, 1  # the fixture tokenizer's [EOS] is 2; pad 0 never occurs in the documents
VOCAB = 100


def documents(kind: str) -> list[np.ndarray]:
    """Each document ends with EOS (``kind="eos"``) or starts with BOS (``"bos"``); words are 3..99."""
    rng = np.random.default_rng(38)
    docs = []
    for _ in range(NUM_DOCUMENTS):
        words = rng.integers(3, VOCAB, int(rng.integers(2, 25)))
        docs.append(np.append(words, EOS) if kind == "eos" else np.insert(words, 0, BOS))
    return [doc.astype(np.int32) for doc in docs]


def write_documents(root: Path, kind: str) -> Path:
    """The documents as one MDS stream, ``root/train`` (llm-foundry's split), in shards of ~512 bytes."""
    with MDSWriter(out=str(root / "train"), columns={"tokens": "ndarray:int32"}, size_limit=1 << 9) as writer:
        for doc in documents(kind):
            writer.write({"tokens": doc})
    assert len(list((root / "train").glob("shard.*.mds"))) > 3, "blocks must cross shard boundaries"
    return root


def reference_blocks(kind: str, block_size: int = BLOCK_SIZE) -> list[torch.Tensor]:
    """Block b is tokens [b * block_size, (b + 1) * block_size + 1) of all documents concatenated."""
    stream = [int(token) for doc in documents(kind) for token in doc]
    count = (len(stream) - 1) // block_size
    return [torch.tensor(stream[b * block_size : (b + 1) * block_size + 1]) for b in range(count)]


def row_id(row: torch.Tensor) -> int:
    """One int naming a block by its tokens (a polynomial hash), for batch histories."""
    value = 0
    for token in row.tolist():
        value = (value * 1_000_003 + int(token) + 1) % (1 << 61)
    return value
