"""Language-model inputs from streamed shards: llm-foundry's ``text`` dataset semantics on our core.

- ``StreamingTextDataset``: samples become ``input_ids`` (a ``text`` column tokenized, ``tokens`` decoded).
- ``TextCollator``: batches with ``input_ids``, ``labels`` (and ``attention_mask``, ``sequence_id``).
- ``StreamingTokenBlockDataset``: fixed-size token blocks read across sample boundaries (pre-training),
  optionally with where documents start in them; ``collate_token_blocks`` batches those.
- ``as_text_tokenizer``: a ``transformers`` tokenizer, a ``tokenizers.Tokenizer`` or a tokenizer.json path.
"""

from stream_plugin.text.block_collate import collate_token_blocks
from stream_plugin.text.block_dataset import StreamingTokenBlockDataset
from stream_plugin.text.collate import IGNORE_INDEX, TextCollator, mlm_collator
from stream_plugin.text.dataset import StreamingTextDataset
from stream_plugin.text.samples import TOKEN_ENCODING_TYPES
from stream_plugin.text.tokenizer import TextTokenizer, as_text_tokenizer

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
