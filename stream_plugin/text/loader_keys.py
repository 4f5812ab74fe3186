"""The dataset keys of llm-foundry's text loader: one list, read by the Composer integration's loader and
by ``stream-plugin simulate`` (which reads llm-foundry YAMLs but must not import the integration)."""

from __future__ import annotations

import inspect

from stream_plugin.text.dataset import StreamingTextDataset

# dataset keys llm-foundry's text loader reads outside StreamingDataset's signature.
COLLATOR_KEYS = ("eos_token_id", "bos_token_id", "mlm_probability")
CHECK_KEYS = (
    "override_eos_token_id_mismatch_error",
    "override_bos_token_id_mismatch_error",
    "seq_parallel_replication",
)
TEXT_DATASET_KEYS: tuple[str, ...] = tuple(
    name
    for name, parameter in inspect.signature(StreamingTextDataset.__init__).parameters.items()
    if parameter.kind is parameter.KEYWORD_ONLY and name != "tokenizer"
)
TEXT_KEYS = (*TEXT_DATASET_KEYS, *COLLATOR_KEYS, *CHECK_KEYS)

__all__ = ["CHECK_KEYS", "COLLATOR_KEYS", "TEXT_DATASET_KEYS", "TEXT_KEYS"]
