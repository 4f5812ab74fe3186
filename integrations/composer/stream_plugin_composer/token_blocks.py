"""``dataset.token_blocks``: the YAML builder's switch to ``StreamingTokenBlockDataset`` (pre-training).

One key in the ``dataset`` section, in either of the builder's two shapes:

- **llm-foundry's text section** (``max_seq_len``, ``eos_token_id``, ...): ``token_blocks: true`` reads
  the ``tokens`` column as one token stream per stream, cut into blocks of ``max_seq_len`` tokens
  (``block_size = max_seq_len - 1`` inputs plus the label of the last one; the model shifts labels, as
  llm-foundry's do). ``TextCollator`` batches the blocks exactly as llm-foundry's ``text`` collator
  batches stored samples of that length: ``input_ids`` and ``labels`` ``(B, max_seq_len)``,
  ``sequence_id`` when ``eos_token_id`` or ``bos_token_id`` is set (what the model reads with
  ``attn_uses_sequence_id``), and llm-foundry's per-row token counts.
- **A plain section**: ``token_blocks: {block_size: 2048, ...}`` holds ``StreamingTokenBlockDataset``'s
  own options (``column``, ``dtype``, ``sequence_id``, ``position_ids``, ``cu_seqlens``,
  ``eos_token_id``, ...); ``collate_token_blocks`` batches them.

Off by default: without the key a text section keeps llm-foundry's meaning, one stored sample per
training sample, so a MosaicML or earlier checkpoint resumes at the same sample.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from stream_plugin import ConfigError
from stream_plugin.reading.stream_registry import DEFAULT_STREAM_NAME
from stream_plugin.text import StreamingTokenBlockDataset
from stream_plugin.units import parse_whole_number

TOKEN_BLOCKS_KEY = "token_blocks"

# StreamingTokenBlockDataset's own options, read from its signature (the rest are StreamingDataset's).
BLOCK_KEYS: tuple[str, ...] = tuple(
    name
    for name, parameter in inspect.signature(StreamingTokenBlockDataset.__init__).parameters.items()
    if parameter.kind is parameter.KEYWORD_ONLY
)


def pop_token_blocks(arguments: dict[str, Any]) -> Any:
    """The ``token_blocks`` setting, removed from the ``dataset`` arguments (None when absent or false)."""
    setting = arguments.pop(TOKEN_BLOCKS_KEY, None)
    return None if setting is False else setting


def refuse_masking(setting: Any, arguments: Mapping[str, Any]) -> None:
    """``mlm_probability`` masks tokens for a masked-language model; blocks are for causal pre-training."""
    if setting is not None and arguments.get("mlm_probability") is not None:
        raise ConfigError(
            f"train_loader.dataset.mlm_probability: expected it unset with token_blocks (blocks train "
            f"causal language models), found {arguments['mlm_probability']!r}; remove one of the two"
        )


def text_block_options(setting: Any, text_options: dict[str, Any]) -> dict[str, Any]:
    """``StreamingTokenBlockDataset`` options for llm-foundry's text keys (``text_options``: ``text_parts``' dataset options)."""
    if setting is not True:
        raise ConfigError(
            f"train_loader.dataset.token_blocks: expected true with llm-foundry's text keys (blocks of "
            f"max_seq_len tokens), found {setting!r}; write token_blocks: true, or drop the text keys and "
            f"give StreamingTokenBlockDataset's options as a mapping ({', '.join(BLOCK_KEYS)})"
        )
    if text_options.get("stream_name", DEFAULT_STREAM_NAME) != DEFAULT_STREAM_NAME or text_options.get("stream_config"):
        raise ConfigError(
            f"stream_name / stream_config: expected the default Stream ({DEFAULT_STREAM_NAME!r}, no config), "
            f"found {text_options.get('stream_name')!r} / {text_options.get('stream_config')!r}; give "
            "per-stream settings under `streams` instead"
        )
    max_seq_len = parse_whole_number(
        text_options["max_seq_len"], name="max_seq_len", meaning="tokens per block", fix="set e.g. max_seq_len: 2048"
    )
    if max_seq_len < 2:
        raise ConfigError(
            f"train_loader.dataset.max_seq_len: expected at least 2 with token_blocks (a block is "
            f"max_seq_len tokens, the last one only a label), found {max_seq_len}; raise it"
        )
    options: dict[str, Any] = {"block_size": max_seq_len - 1, "column": "tokens"}
    if "token_encoding_type" in text_options:
        options["token_encoding_type"] = text_options["token_encoding_type"]
    return options


def plain_block_options(setting: Any) -> dict[str, Any]:
    """``StreamingTokenBlockDataset`` options from a plain section's ``token_blocks`` mapping (batch them
    with ``collate_token_blocks``, count them with ``blocks_in_batch`` and ``input_tokens_in_batch``)."""
    if not isinstance(setting, Mapping) or "block_size" not in setting:
        raise ConfigError(
            f"train_loader.dataset.token_blocks: expected a mapping of StreamingTokenBlockDataset options "
            f"with block_size, found {setting!r}; write e.g. token_blocks: {{block_size: 2048}}, or give "
            "llm-foundry's max_seq_len in the dataset section with token_blocks: true"
        )
    unknown = sorted(set(setting) - set(BLOCK_KEYS))
    if unknown:
        raise ConfigError(
            f"train_loader.dataset.token_blocks: expected keys among {list(BLOCK_KEYS)}, found unknown "
            f"{unknown}; fix the spelling, or move StreamingDataset's options up into the dataset section"
        )
    return dict(setting)


def _block_rows(batch: Any) -> torch.Tensor:
    rows = batch.get("input_ids") if isinstance(batch, Mapping) else batch
    if not isinstance(rows, torch.Tensor) or rows.dim() != 2:
        raise ConfigError(
            f"token blocks: expected a (blocks, block_size + 1) tensor or a dict with input_ids, found "
            f"{type(batch).__name__}; batch StreamingTokenBlockDataset items with collate_token_blocks"
        )
    return rows


def blocks_in_batch(batch: Any) -> int:
    """Blocks in a ``collate_token_blocks`` batch (its ``cu_seqlens`` has another length)."""
    return int(_block_rows(batch).shape[0])


def input_tokens_in_batch(batch: Any) -> int:
    """Input tokens in a ``collate_token_blocks`` batch: ``block_size`` per block (the last token is a
    label only), so a pass over a stream counts each of its tokens once."""
    rows = _block_rows(batch)
    return int(rows.shape[0] * (rows.shape[1] - 1))


__all__ = [
    "BLOCK_KEYS",
    "TOKEN_BLOCKS_KEY",
    "blocks_in_batch",
    "input_tokens_in_batch",
    "plain_block_options",
    "pop_token_blocks",
    "refuse_masking",
    "text_block_options",
]
