"""TextCollator: llm-foundry's text batches (input_ids, labels, sequence_id, token counts)."""

from __future__ import annotations

import pytest
import torch

from stream_plugin import ConfigError
from stream_plugin.text import IGNORE_INDEX, TextCollator

PAD, EOS, BOS = 0, 2, 3


def test_labels_are_input_ids_with_padding_ignored() -> None:
    examples = [
        {"input_ids": torch.tensor([5, 6, EOS, PAD]), "attention_mask": torch.tensor([1, 1, 1, 0])},
        {"input_ids": torch.tensor([7, 8, 9, EOS]), "attention_mask": torch.tensor([1, 1, 1, 1])},
    ]
    batch = TextCollator(pad_token_id=PAD)(examples)
    assert batch["input_ids"].tolist() == [[5, 6, EOS, PAD], [7, 8, 9, EOS]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert batch["labels"].tolist() == [[5, 6, EOS, IGNORE_INDEX], [7, 8, 9, EOS]]


def test_token_rows_of_different_lengths_are_padded_on_the_padding_side() -> None:
    rows = [torch.tensor([5, 6, 7]), torch.tensor([8])]
    right = TextCollator(pad_token_id=PAD)(rows)
    left = TextCollator(pad_token_id=PAD, padding_side="left")(rows)
    assert right["input_ids"].tolist() == [[5, 6, 7], [8, PAD, PAD]]
    assert left["input_ids"].tolist() == [[5, 6, 7], [PAD, PAD, 8]]
    assert "attention_mask" not in right  # as llm-foundry: token rows carry no mask
    assert right["labels"].tolist() == [[5, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX]]


def test_rows_of_different_lengths_without_a_pad_token_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"expected samples of one length or a pad token .*found lengths \[1, 3\]"):
        TextCollator()([torch.tensor([5, 6, 7]), torch.tensor([8])])


def test_sequence_id_counts_documents_ended_by_eos() -> None:
    batch = TextCollator(eos_token_id=EOS)([torch.tensor([5, EOS, 6, 7, EOS, 8])])
    assert batch["sequence_id"].tolist() == [[0, 0, 1, 1, 1, 2]]


def test_sequence_id_counts_documents_started_by_bos() -> None:
    batch = TextCollator(bos_token_id=BOS)([torch.tensor([BOS, 5, BOS, 6, 7, BOS])])
    assert batch["sequence_id"].tolist() == [[1, 1, 2, 2, 2, 3]]


def test_no_sequence_id_without_eos_or_bos() -> None:
    assert "sequence_id" not in TextCollator()([torch.tensor([5, EOS, 6])])


def test_both_eos_and_bos_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"eos_token_id / bos_token_id: expected at most one .*found both \(2 and 3\)"):
        TextCollator(eos_token_id=EOS, bos_token_id=BOS)


def test_token_counts_per_row() -> None:
    examples = [
        {"input_ids": torch.tensor([5, 6, PAD, PAD]), "attention_mask": torch.tensor([1, 1, 0, 0])},
        {"input_ids": torch.tensor([7, 8, 9, 4]), "attention_mask": torch.tensor([1, 1, 1, 1])},
    ]
    batch = TextCollator(pad_token_id=PAD)(examples)
    assert batch["total_tokens"] == [2, 4]
    assert batch["loss_generating_tokens"] == [1, 3]  # label positions after the first, not ignored
    assert "total_tokens" not in TextCollator(pad_token_id=PAD, count_tokens=False)(examples)


def test_a_masking_collator_builds_the_batch_and_gets_sequence_id_and_counts_added() -> None:
    def mask_everything(examples: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        input_ids = torch.stack(examples)
        return {"input_ids": input_ids, "labels": torch.full_like(input_ids, IGNORE_INDEX)}

    batch = TextCollator(eos_token_id=EOS, masking=mask_everything)([torch.tensor([5, EOS, 6])])
    assert batch["labels"].tolist() == [[IGNORE_INDEX] * 3]
    assert batch["sequence_id"].tolist() == [[0, 0, 1]]
    assert batch["loss_generating_tokens"] == [0]
