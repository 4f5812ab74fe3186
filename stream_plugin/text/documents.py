"""Where documents start inside a token block: per-token document ids, positions and ``cu_seqlens``.

Pure numpy, no I/O. A block of ``block_size + 1`` tokens (inputs plus the last label) holds the ends
and starts of several documents. Packed-sequence attention must not cross them, so each block can
carry:

- ``sequence_id`` ``(block_size + 1,)`` int64: per token, the index of its document within the block,
  from 0 (llm-foundry's ``sequence_id``; FlexAttention's ``document_id`` per row);
- ``position_ids`` ``(block_size + 1,)`` int64: the token's position inside its document *within the
  block*, restarting at 0 at each document (a document cut by the block's start starts again at 0,
  as flash-attention's varlen kernels see it: no token attends before the block);
- ``cu_seqlens`` ``(documents + 1,)`` int32: the cumulative lengths of the documents of the
  ``block_size`` *inputs* (the last token, a label only, is left out), from 0 to ``block_size``: what
  ``flash_attn_varlen_func`` takes for one row.

A document is either a sample (``lengths``: how many tokens of each sample the block holds, in order)
or a run of tokens that ends with an EOS token (the EOS belongs to the document it ends, as in
llm-foundry's collator; the token after it starts the next), or one that starts with a BOS token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BlockDocuments:
    """The documents of one block: ``sequence_id``, ``position_ids`` and ``cu_seqlens`` (see module)."""

    sequence_id: np.ndarray  # (block_size + 1,) int64
    position_ids: np.ndarray  # (block_size + 1,) int64
    cu_seqlens: np.ndarray  # (documents of the inputs + 1,) int32


def documents_from_lengths(lengths: np.ndarray) -> BlockDocuments:
    """The documents of a block whose consecutive documents hold ``lengths`` tokens (all > 0), summing
    to ``block_size + 1``."""
    lengths = np.asarray(lengths, np.int64)  # (documents,)
    assert lengths.size and int(lengths.min()) > 0, "every document of a block holds a token"
    total = int(lengths.sum())  # block_size + 1
    starts = np.zeros(len(lengths), np.int64)  # (documents,): first token of each document
    np.cumsum(lengths[:-1], out=starts[1:])
    sequence_id = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)  # (total,)
    position_ids = np.arange(total, dtype=np.int64) - starts[sequence_id]  # (total,)
    bounds = np.append(starts, total - 1)  # (documents + 1,): the inputs end one token early
    cu_seqlens = np.unique(bounds).astype(np.int32)  # a last document of only the label drops out
    return BlockDocuments(sequence_id, position_ids, cu_seqlens)


def document_lengths_from_eos(tokens: np.ndarray, eos_token_id: int) -> np.ndarray:
    """``(documents,)`` int64: the lengths of the documents of ``tokens``, each ending after an EOS."""
    ends = np.flatnonzero(np.asarray(tokens) == eos_token_id) + 1  # (eos,): one past each EOS
    bounds = np.concatenate([[0], ends[ends < len(tokens)], [len(tokens)]])  # (documents + 1,)
    return np.diff(bounds).astype(np.int64)


def document_lengths_from_bos(tokens: np.ndarray, bos_token_id: int) -> np.ndarray:
    """``(documents,)`` int64: the lengths of the documents of ``tokens``, each starting at a BOS."""
    starts = np.flatnonzero(np.asarray(tokens) == bos_token_id)  # (bos,)
    bounds = np.concatenate([[0], starts[starts > 0], [len(tokens)]])  # (documents + 1,)
    return np.diff(bounds).astype(np.int64)


__all__ = [
    "BlockDocuments",
    "document_lengths_from_bos",
    "document_lengths_from_eos",
    "documents_from_lengths",
]
