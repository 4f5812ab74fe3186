"""``TextCollator``: batches of model inputs, built as llm-foundry's ``text`` collator builds them.

For samples from ``StreamingTextDataset`` (token tensors, or dicts of them from a ``text`` column):

- ``input_ids`` (B, L): stacked; samples of different lengths are padded to the longest with the pad
  token, on the tokenizer's padding side. Dict samples give every key they have (``attention_mask``).
- ``labels`` (B, L): ``input_ids`` with every pad token replaced by -100 (ignored by the loss). The
  shift by one happens in the model, as in llm-foundry.
- ``sequence_id`` (B, L), only with ``eos_token_id`` or ``bos_token_id``: the index of the document each
  token belongs to in a concatenated sample. With EOS the EOS token still belongs to the document it
  ends; with BOS the BOS token starts the next one.
- ``total_tokens`` and ``loss_generating_tokens``: one int per row (lists of B), what llm-foundry's
  trainer counts tokens with: attention-mask ones (or all tokens), and label positions after the first
  that are not -100.

Masked-language-model batches (``mlm_probability``) come from ``transformers``' collator
(``mlm_collator``, passed as ``masking``); ``sequence_id`` and the token counts are added to them too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from stream_plugin.errors import ConfigError
from stream_plugin.text.tokenizer import PaddingSide, TextTokenizer

IGNORE_INDEX = -100  # the label value cross-entropy skips (llm-foundry's CROSS_ENTROPY_IGNORE_INDEX)
_PAD_VALUES = {"attention_mask": 0, "token_type_ids": 0, "special_tokens_mask": 1}


def pad_rows(rows: Sequence[torch.Tensor], pad_value: int | None, side: PaddingSide) -> torch.Tensor:
    """(B, max length): rows stacked, shorter ones padded with ``pad_value`` on ``side``."""
    longest = max(len(row) for row in rows)
    if all(len(row) == longest for row in rows):
        return torch.stack(list(rows))
    if pad_value is None:
        lengths = sorted({len(row) for row in rows})
        raise ConfigError(
            f"TextCollator: expected samples of one length or a pad token to pad them, found lengths "
            f"{lengths} and no pad token; give the tokenizer a pad token or write samples of max_seq_len tokens"
        )
    padded = torch.full((len(rows), longest), pad_value, dtype=rows[0].dtype)  # (B, L)
    for index, row in enumerate(rows):
        if side == "left":
            padded[index, longest - len(row) :] = row
        else:
            padded[index, : len(row)] = row
    return padded


def sequence_ids(input_ids: torch.Tensor, *, eos_token_id: int | None, bos_token_id: int | None) -> torch.Tensor:
    """(B, L): the document index of every token, counted from 0 in each row."""
    split_token = eos_token_id if eos_token_id is not None else bos_token_id
    assert split_token is not None, "sequence_ids needs eos_token_id or bos_token_id"
    separators = torch.cumsum(torch.eq(input_ids, split_token), dim=1).to(input_ids.dtype)  # (B, L)
    if eos_token_id is None:
        return separators  # a BOS token opens the next document
    # An EOS token closes its own document: shift the count right by one token.
    first_column = separators.new_zeros((separators.shape[0], 1))  # (B, 1)
    return torch.cat([first_column, separators[:, :-1]], dim=1)  # (B, L)


def token_counts(batch: Mapping[str, torch.Tensor]) -> tuple[list[int], list[int]]:
    """Per row: (tokens, loss-generating tokens), as llm-foundry counts them."""
    input_ids, labels = batch["input_ids"], batch["labels"]
    mask = batch.get("attention_mask")
    totals = (mask.sum(dim=1) if mask is not None else torch.full((len(input_ids),), input_ids.shape[1]))
    loss_generating = (labels[:, 1:] != IGNORE_INDEX).sum(dim=1)  # (B,)
    return [int(value) for value in totals], [int(value) for value in loss_generating]


@dataclass
class TextCollator:
    """Collates ``StreamingTextDataset`` samples into llm-foundry's batch (see the module docstring)."""

    pad_token_id: int | None = None
    padding_side: PaddingSide = "right"
    eos_token_id: int | None = None
    bos_token_id: int | None = None
    count_tokens: bool = True
    # Builds input_ids / labels instead of padding here (``mlm_collator``: masked-language-model batches).
    masking: Callable[[list[Any]], Any] | None = None

    def __post_init__(self) -> None:
        if self.eos_token_id is not None and self.bos_token_id is not None:
            raise ConfigError(
                f"eos_token_id / bos_token_id: expected at most one to mark document boundaries, found both "
                f"({self.eos_token_id} and {self.bos_token_id}); keep eos_token_id if documents end with "
                "EOS, bos_token_id if they start with BOS"
            )
        if self.padding_side not in ("left", "right"):
            raise ConfigError(f"padding_side: expected 'left' or 'right', found {self.padding_side!r}")

    @classmethod
    def for_tokenizer(
        cls,
        tokenizer: TextTokenizer | None,
        *,
        eos_token_id: int | None = None,
        bos_token_id: int | None = None,
        count_tokens: bool = True,
        masking: Callable[[list[Any]], Any] | None = None,
    ) -> TextCollator:
        """Pad token and side from ``tokenizer`` (None: samples must share one length)."""
        return cls(
            masking=masking,
            pad_token_id=None if tokenizer is None else tokenizer.pad_token_id,
            padding_side="right" if tokenizer is None else tokenizer.padding_side,
            eos_token_id=eos_token_id,
            bos_token_id=bos_token_id,
            count_tokens=count_tokens,
        )

    def collate(self, examples: Sequence[Any]) -> dict[str, Any]:
        """The batch without token counts: ``input_ids``, ``labels``, and the dict samples' other keys."""
        if self.masking is not None:
            return dict(self.masking(list(examples)))
        if isinstance(examples[0], Mapping):
            batch = {
                key: pad_rows([example[key] for example in examples], self._pad_value(key), self.padding_side)
                for key in examples[0]
            }
        else:
            batch = {"input_ids": pad_rows(list(examples), self.pad_token_id, self.padding_side)}
        batch.pop("special_tokens_mask", None)
        labels = batch["input_ids"].clone()
        if self.pad_token_id is not None:
            labels[labels == self.pad_token_id] = IGNORE_INDEX
        batch["labels"] = labels
        return batch

    def __call__(self, examples: Sequence[Any]) -> dict[str, Any]:
        batch: dict[str, Any] = self.collate(examples)
        if self.eos_token_id is not None or self.bos_token_id is not None:
            batch["sequence_id"] = sequence_ids(
                batch["input_ids"], eos_token_id=self.eos_token_id, bos_token_id=self.bos_token_id
            )
        if self.count_tokens:
            batch["total_tokens"], batch["loss_generating_tokens"] = token_counts(batch)
        return batch

    def _pad_value(self, key: str) -> int | None:
        return self.pad_token_id if key == "input_ids" else _PAD_VALUES.get(key, 0)


def mlm_collator(tokenizer: Any, mlm_probability: float) -> Callable[[list[Any]], Any]:
    """``transformers``' masked-language-model collator, as llm-foundry builds it for ``mlm_probability``."""
    try:
        from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase
    except ImportError as error:
        raise ConfigError(
            f"mlm_probability: expected `transformers` to build masked-language-model batches, found it "
            f"missing ({error}); pip install transformers, or remove mlm_probability"
        ) from error
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise ConfigError(
            f"mlm_probability: expected a transformers tokenizer (masking needs its mask token), found "
            f"{type(tokenizer).__name__}; pass a transformers tokenizer, or remove mlm_probability"
        )
    return DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm=True, mlm_probability=mlm_probability)
