"""``StreamingTextDataset``: llm-foundry's ``text`` dataset (same arguments, same defaults) on our core.

Everything about the order, resumption and caching is ``StreamingDataset``'s; this subclass only turns
each stored sample into a model input (``stream_plugin.text.samples``). Collate its samples with
``TextCollator``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from stream_plugin.errors import ConfigError
from stream_plugin.reading.dataset import StreamingDataset
from stream_plugin.reading.stream_registry import DEFAULT_STREAM_NAME
from stream_plugin.text.samples import check_token_encoding_type, model_input
from stream_plugin.text.tokenizer import TextTokenizer, as_text_tokenizer
from stream_plugin.units import parse_whole_number


def check_max_seq_len(value: Any) -> int:
    return parse_whole_number(value, name="max_seq_len", meaning="tokens per sample", fix="set e.g. max_seq_len: 2048")


def _columns(config: Mapping[str, Any]) -> list[str]:
    """A shard's column names: MDS lists them, JSON lines map them to encodings."""
    names = config.get("column_names", config.get("columns"))
    return [str(name) for name in names] if isinstance(names, (list, dict)) else []


class StreamingTextDataset(StreamingDataset):
    """Streams model inputs for causal language models, as llm-foundry's ``StreamingTextDataset`` does.

    Args:
        tokenizer: tokenizes a ``text`` column (a ``transformers`` tokenizer, a ``tokenizers.Tokenizer``
            or a ``tokenizer.json`` path); may be None when the shards hold ``tokens`` or ``input_ids``.
        max_seq_len: tokens per sample: text is truncated and padded to it, token columns cut to it.
        token_encoding_type: the dtype of ``tokens`` stored as raw ``bytes`` (ndarray columns carry
            their own dtype). Defaults to ``int64``, as in llm-foundry.
        stream_name, stream_config: accepted for llm-foundry's signature; only the default ``Stream`` is
            available here.
        Every other argument is ``StreamingDataset``'s.
    """

    def __init__(
        self,
        *,
        tokenizer: Any = None,
        max_seq_len: int,
        token_encoding_type: str = "int64",
        stream_name: str = DEFAULT_STREAM_NAME,
        stream_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if stream_name != DEFAULT_STREAM_NAME or stream_config:
            raise ConfigError(
                f"stream_name / stream_config: expected the default Stream ({DEFAULT_STREAM_NAME!r}, no config), found "
                f"{stream_name!r} / {stream_config!r}; give per-stream settings under `streams` instead"
            )
        self.max_seq_len = check_max_seq_len(max_seq_len)
        self.token_encoding_type = check_token_encoding_type(token_encoding_type)
        self.tokenizer: TextTokenizer | None = None if tokenizer is None else as_text_tokenizer(tokenizer)
        super().__init__(**kwargs)
        if self.tokenizer is None and any("text" in _columns(shard.config) for shard in self.shards):
            raise ConfigError(
                "tokenizer: expected a tokenizer, since the shards have a `text` column, found None; pass "
                "tokenizer= (a transformers tokenizer, a tokenizers.Tokenizer or a tokenizer.json path)"
            )

    def get_item(self, sample_id: int) -> dict[str, torch.Tensor] | torch.Tensor:
        return model_input(
            super().get_item(sample_id),
            tokenizer=self.tokenizer,
            max_seq_len=self.max_seq_len,
            token_encoding_type=self.token_encoding_type,
        )
