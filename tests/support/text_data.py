"""Offline text fixtures: a word-level tokenizer trained here (no hub access) and small text shards.

Every document starts with its own id word (``doc17``), and token datasets start with the sample id as
their first token, so a batch's first column names its samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from stream_plugin import MDSWriter

PAD, UNK, EOS, MASK = "[PAD]", "[UNK]", "[EOS]", "[MASK]"
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away"]


def document(sample_id: int) -> str:
    """``doc<id>`` then 1 to 12 words (some documents outgrow a small max_seq_len)."""
    words = [WORDS[(sample_id * 7 + step) % len(WORDS)] for step in range(1 + sample_id % 12)]
    return " ".join([f"doc{sample_id}", *words])


def train_tokenizer(path: Path, num_documents: int = 200) -> Path:
    """A word-level ``tokenizers`` tokenizer over the fixture documents, saved as tokenizer.json.

    It appends [EOS] (id 2) to every text and pads with [PAD] (id 0) on the right; [MASK] is for
    masked-language-model batches.
    """
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing
    from tokenizers.trainers import WordLevelTrainer

    tokenizer = Tokenizer(WordLevel(unk_token=UNK))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.train_from_iterator(
        (document(i) for i in range(num_documents)), WordLevelTrainer(special_tokens=[PAD, UNK, EOS, MASK])
    )
    tokenizer.post_processor = TemplateProcessing(
        single=f"$A {EOS}", special_tokens=[(EOS, tokenizer.token_to_id(EOS))]
    )
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id(PAD), pad_token=PAD)
    tokenizer.save(str(path))
    return path


def write_text(folder: Path, ids: Sequence[int], *, size_limit: int = 1 << 10) -> Path:
    """An MDS stream of ``{"text": document(i)}``."""
    with MDSWriter(out=str(folder), columns={"text": "str"}, size_limit=size_limit) as writer:
        for sample_id in ids:
            writer.write({"text": document(int(sample_id))})
    return folder


def token_row(sample_id: int, length: int) -> np.ndarray:
    """``length`` tokens starting with ``sample_id``: [id, id+1, ...]."""
    return np.arange(sample_id, sample_id + length, dtype=np.int64)


def write_tokens(
    folder: Path, ids: Sequence[int], *, length: int = 12, column: str = "tokens", encoding: str = "ndarray:int32"
) -> Path:
    """An MDS stream of token rows; ``encoding="bytes"`` stores them as raw int32 bytes (legacy shards)."""
    with MDSWriter(out=str(folder), columns={column: encoding}, size_limit=1 << 10) as writer:
        for sample_id in ids:
            dtype = "int32" if encoding == "bytes" else encoding.removeprefix("ndarray:")
            row = token_row(int(sample_id), length).astype(dtype)
            writer.write({column: row.tobytes() if encoding == "bytes" else row})
    return folder
