"""One stored sample -> one model input, as llm-foundry's ``StreamingTextDataset`` makes it.

- a ``text`` column is tokenized, truncated and padded to ``max_seq_len`` (a dict of int64 tensors:
  ``input_ids``, ``attention_mask``, ...);
- else a ``tokens`` column: an ndarray is cut to ``max_seq_len``; ``bytes`` are first decoded with
  ``token_encoding_type`` (legacy shards that stored raw token bytes);
- else an ``input_ids`` ndarray column, used as it is stored (only cut to ``max_seq_len``).

Token tensors are int64 whatever the stored dtype: the models' embedding lookups expect it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from stream_plugin.errors import ConfigError, EncodingError
from stream_plugin.text.tokenizer import TextTokenizer

# The dtypes llm-foundry accepts for token_encoding_type, under the same names.
TOKEN_ENCODING_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
TEXT_COLUMNS = ("text", "tokens", "input_ids")


def check_token_encoding_type(value: str) -> str:
    if value not in TOKEN_ENCODING_TYPES:
        raise ConfigError(
            f"token_encoding_type: expected one of {list(TOKEN_ENCODING_TYPES)} (the dtype the `tokens` "
            f"bytes were written with), found {value!r}"
        )
    return value


def decode_token_bytes(data: bytes, token_encoding_type: str) -> np.ndarray:
    """``bytes`` written from an array of ``token_encoding_type`` back to that array."""
    dtype = np.dtype(token_encoding_type)
    if len(data) % dtype.itemsize:
        raise EncodingError(
            f"tokens: expected a multiple of {dtype.itemsize} bytes (token_encoding_type={token_encoding_type!r}), "
            f"found {len(data)} bytes; set token_encoding_type to the dtype the shards were written with"
        )
    return np.frombuffer(data, dtype=dtype)


def _token_tensor(tokens: np.ndarray, max_seq_len: int) -> torch.Tensor:
    return torch.from_numpy(np.array(tokens[:max_seq_len], dtype=np.int64))


def model_input(
    sample: Mapping[str, Any],
    *,
    tokenizer: TextTokenizer | None,
    max_seq_len: int,
    token_encoding_type: str,
) -> dict[str, torch.Tensor] | torch.Tensor:
    """The model input for one stored ``sample`` (see the module docstring for the column rules)."""
    if "text" in sample:
        if tokenizer is None:
            raise ConfigError(
                "tokenizer: expected a tokenizer to tokenize the `text` column, found None; pass "
                "tokenizer= (a transformers tokenizer, a tokenizers.Tokenizer or a tokenizer.json path)"
            )
        encoded = tokenizer.encode(sample["text"], max_seq_len)
        return {key: torch.tensor(value, dtype=torch.int64) for key, value in encoded.items()}
    if "tokens" in sample:
        tokens = sample["tokens"]
        if isinstance(tokens, (bytes, bytearray, memoryview)):
            tokens = decode_token_bytes(bytes(tokens), token_encoding_type)
        return _token_tensor(np.asarray(tokens), max_seq_len)
    if "input_ids" in sample and isinstance(sample["input_ids"], np.ndarray):
        return _token_tensor(sample["input_ids"], max_seq_len)
    raise ConfigError(
        f"StreamingTextDataset: expected a sample with a `text`, `tokens` or `input_ids` (ndarray) column, "
        f"found columns {sorted(sample)}; write one of those, or read these shards with StreamingDataset"
    )
