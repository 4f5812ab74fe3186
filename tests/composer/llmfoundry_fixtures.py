"""Offline data for the llm-foundry tests: a raw-text and a pre-tokenized dataset, and a tokenizer
folder ``AutoTokenizer.from_pretrained`` loads (the word-level tokenizer of tests/support/text_data)."""

from __future__ import annotations

from pathlib import Path

from support.text_data import EOS, MASK, PAD, UNK, train_tokenizer, write_text, write_tokens

NUM_DOCUMENTS = 200
MAX_SEQ_LEN = 16


def write_tokenizer_folder(folder: Path) -> Path:
    """A transformers tokenizer folder (pad [PAD] = 0, eos [EOS] = 2), saved without hub access."""
    from transformers import PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer_file = train_tokenizer(folder / "word-level.json", NUM_DOCUMENTS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file), pad_token=PAD, eos_token=EOS, unk_token=UNK, mask_token=MASK
    )
    tokenizer.save_pretrained(str(folder))
    return folder


def write_datasets(root: Path) -> dict[str, Path]:
    """``text``: raw documents; ``tokens``: int32 ndarray rows; ``bytes``: the same rows as raw bytes.
    Each has a ``train`` split, as llm-foundry's configs expect."""
    return {
        "text": write_text(root / "text" / "train", range(NUM_DOCUMENTS)).parent,
        "tokens": write_tokens(root / "tokens" / "train", range(NUM_DOCUMENTS), length=MAX_SEQ_LEN + 4).parent,
        "bytes": write_tokens(
            root / "bytes" / "train", range(NUM_DOCUMENTS), length=MAX_SEQ_LEN, encoding="bytes"
        ).parent,
    }
