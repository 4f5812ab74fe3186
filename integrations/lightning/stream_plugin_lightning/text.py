"""``StreamingTextDataModule``: llm-foundry-style language-model batches through our DataModule.

Every split is a ``StreamingTextDataset`` (``text`` tokenized, ``tokens`` decoded, cut or padded to
``max_seq_len``) collated by ``TextCollator`` (``input_ids``, ``labels``, ``attention_mask`` from text,
``sequence_id`` with ``eos_token_id`` / ``bos_token_id``). Resumption is ``StreamingDataModule``'s.
"""

from __future__ import annotations

from typing import Any

from stream_plugin.text import StreamingTextDataset, TextCollator, as_text_tokenizer
from stream_plugin_lightning.datamodule import Split, StreamingDataModule
from stream_plugin_lightning.specs import DatasetSpec


class StreamingTextDataModule(StreamingDataModule):
    """``StreamingDataModule`` for causal language models.

    Args:
        tokenizer: a ``tokenizer.json`` path (YAML-friendly), a ``tokenizers.Tokenizer`` or a
            ``transformers`` tokenizer; may be None when the shards hold token columns.
        max_seq_len, token_encoding_type: as in llm-foundry's text dataset.
        eos_token_id, bos_token_id: add ``sequence_id`` to batches (at most one of them).
        Everything else (the splits, batch sizes, loader options, ``collate_fn`` to replace
        ``TextCollator``) is ``StreamingDataModule``'s.
    """

    def __init__(
        self,
        train: DatasetSpec | None = None,
        val: DatasetSpec | None = None,
        test: DatasetSpec | None = None,
        predict: DatasetSpec | None = None,
        *,
        max_seq_len: int,
        tokenizer: Any = None,
        token_encoding_type: str = "int64",
        eos_token_id: int | None = None,
        bos_token_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.tokenizer = None if tokenizer is None else as_text_tokenizer(tokenizer)
        self.text_options: dict[str, Any] = {
            "max_seq_len": max_seq_len,
            "token_encoding_type": token_encoding_type,
        }
        if kwargs.get("collate_fn") is None:
            kwargs["collate_fn"] = TextCollator.for_tokenizer(
                self.tokenizer, eos_token_id=eos_token_id, bos_token_id=bos_token_id
            )
        super().__init__(train, val, test, predict, **kwargs)

    def build_dataset(self, split: Split, spec: DatasetSpec, batch_size: int) -> StreamingTextDataset:
        del split
        return StreamingTextDataset(
            tokenizer=self.tokenizer,
            batch_size=batch_size,
            world=self.world(),
            **self.data_parallel_kwargs(),
            **self.text_options,
            **spec.dataset_kwargs(),
        )
