"""``collate_token_blocks``: a batch of token blocks, with their document fields packed for attention.

Items come from ``StreamingTokenBlockDataset``: a 1-D tensor each (then the batch is their stack), or
a dict with ``input_ids`` and the document fields asked for. For B blocks of ``block_size`` L:

- ``input_ids``, ``sequence_id``, ``position_ids``: stacked, ``(B, L + 1)``. Every block has the same
  length, so nothing is padded. Slice ``[:, :-1]`` for the inputs' values (the last token is a label).
  ``sequence_id`` is the per-row ``document_id`` a FlexAttention document mask compares
  (``sequence_id[b, q] == sequence_id[b, kv]``), and llm-foundry's ``sequence_id``.
- ``cu_seqlens``: packed over the flattened inputs ``input_ids[:, :-1].reshape(-1)`` (B * L tokens),
  int32, ``(documents in the batch + 1,)``, from 0 to B * L; each row's documents end at its row's end,
  so no document crosses rows. With ``max_seqlen`` (an int, the longest document), what
  ``flash_attn_varlen_func`` takes for a packed batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from stream_plugin.errors import ConfigError


def collate_token_blocks(items: Sequence[torch.Tensor | Mapping[str, torch.Tensor]]) -> Any:
    """The batch of ``items`` (see the module): a ``(B, L + 1)`` tensor, or a dict of the fields."""
    first = items[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(list(items))  # type: ignore[arg-type]
    if not isinstance(first, Mapping) or "input_ids" not in first:
        raise ConfigError(
            f"collate_token_blocks: expected StreamingTokenBlockDataset items (a tensor, or a dict with "
            f"input_ids), found {type(first).__name__}; use it only on token blocks"
        )
    rows: list[Mapping[str, torch.Tensor]] = list(items)  # type: ignore[arg-type]
    batch: dict[str, Any] = {
        key: torch.stack([row[key] for row in rows]) for key in first if key != "cu_seqlens"
    }  # each (B, L + 1)
    if "cu_seqlens" in first:
        inputs = len(first["input_ids"]) - 1  # L: the inputs of one block
        starts = [row["cu_seqlens"][:-1] + index * inputs for index, row in enumerate(rows)]  # each (docs,)
        end = torch.tensor([len(rows) * inputs], dtype=torch.int32)
        cu_seqlens = torch.cat([*starts, end]).to(torch.int32)  # (documents in the batch + 1,)
        batch["cu_seqlens"] = cu_seqlens
        batch["max_seqlen"] = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
    return batch


__all__ = ["collate_token_blocks"]
