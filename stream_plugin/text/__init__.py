"""Language-model inputs from streamed shards: llm-foundry's ``text`` dataset semantics on our core.

- ``StreamingTextDataset``: samples become ``input_ids`` (a ``text`` column tokenized, ``tokens`` decoded).
- ``TextCollator``: batches with ``input_ids``, ``labels`` (and ``attention_mask``, ``sequence_id``).
- ``StreamingTokenBlockDataset``: fixed-size token blocks read across sample boundaries (pre-training),
  optionally with where documents start in them; ``collate_token_blocks`` batches those.
- ``as_text_tokenizer``: a ``transformers`` tokenizer, a ``tokenizers.Tokenizer`` or a tokenizer.json path.

The names are imported on first use (they need torch), so ``stream_plugin.text.loader_keys`` (the
llm-foundry keys ``stream-plugin simulate`` reads) imports without it, as the CLI does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stream_plugin.lazy_names import imported_on_use

if TYPE_CHECKING:
    from stream_plugin.text.block_collate import collate_token_blocks
    from stream_plugin.text.block_dataset import StreamingTokenBlockDataset
    from stream_plugin.text.collate import IGNORE_INDEX, TextCollator, mlm_collator
    from stream_plugin.text.dataset import StreamingTextDataset
    from stream_plugin.text.samples import TOKEN_ENCODING_TYPES
    from stream_plugin.text.tokenizer import TextTokenizer, as_text_tokenizer

_IMPORTED_ON_USE = {
    "collate_token_blocks": "stream_plugin.text.block_collate",
    "StreamingTokenBlockDataset": "stream_plugin.text.block_dataset",
    "IGNORE_INDEX": "stream_plugin.text.collate",
    "TextCollator": "stream_plugin.text.collate",
    "mlm_collator": "stream_plugin.text.collate",
    "StreamingTextDataset": "stream_plugin.text.dataset",
    "TOKEN_ENCODING_TYPES": "stream_plugin.text.samples",
    "TextTokenizer": "stream_plugin.text.tokenizer",
    "as_text_tokenizer": "stream_plugin.text.tokenizer",
}


__getattr__ = imported_on_use(__name__, _IMPORTED_ON_USE)


__all__ = [
    "IGNORE_INDEX",
    "TOKEN_ENCODING_TYPES",
    "StreamingTextDataset",
    "StreamingTokenBlockDataset",
    "TextCollator",
    "TextTokenizer",
    "as_text_tokenizer",
    "collate_token_blocks",
    "mlm_collator",
]
