"""llm-foundry's ``text`` loader semantics behind ``name: stream_plugin``.

A ``train_loader`` / ``eval_loader`` section written for llm-foundry's ``text`` loader works with only
``name`` changed: the ``dataset`` keys that only the text loader knows (``max_seq_len``,
``token_encoding_type``, ``eos_token_id``, ``bos_token_id``, ``mlm_probability``, the two
``override_*_token_id_mismatch_error`` flags, ``seq_parallel_replication``, ``stream_name``,
``stream_config``) switch the loader to ``StreamingTextDataset`` + ``TextCollator``, with llm-foundry's
checks and its loader defaults (``pin_memory``, ``persistent_workers``: True; ``prefetch_factor``: 2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stream_plugin import ConfigError
from stream_plugin.redaction import get_logger
from stream_plugin.text import TextCollator, as_text_tokenizer, mlm_collator
from stream_plugin.text.loader_keys import TEXT_KEYS

log = get_logger(__name__)

# llm-foundry's build_text_dataloader defaults for the loader keys (ours without text keys differ).
TEXT_LOADER_DEFAULTS: dict[str, Any] = {"pin_memory": True, "persistent_workers": True, "prefetch_factor": 2}
PLAIN_LOADER_DEFAULTS: dict[str, Any] = {"pin_memory": False, "persistent_workers": False, "prefetch_factor": None}


def is_text_section(dataset: Mapping[str, Any]) -> bool:
    """Whether a ``dataset`` mapping is llm-foundry text-shaped (any key only the text loader knows)."""
    return isinstance(dataset, Mapping) and any(key in dataset for key in TEXT_KEYS)


@dataclass
class TextParts:
    """What a text-shaped ``dataset`` section builds besides the ``StreamingDataset`` arguments."""

    dataset_options: dict[str, Any]  # StreamingTextDataset's own arguments (tokenizer included)
    collate_fn: Callable[[list[Any]], Any]
    seq_parallel_replication: int = 1  # consecutive ranks that share every sample (sequence parallelism)


def _check_special_token(name: str, given: Any, tokenizer: Any, override: bool) -> None:
    expected = getattr(tokenizer, name, None)
    if given is None or tokenizer is None or given == expected:
        return
    message = (
        f"dataset.{name}: expected the tokenizer's {name} {expected!r}, found {given!r}; fix it, or set "
        f"override_{name.removesuffix('_id')}_id_mismatch_error: true in the dataset section to keep it"
    )
    if not override:
        raise ConfigError(message)
    log.warning(message)


def text_parts(arguments: dict[str, Any], tokenizer: Any) -> TextParts:
    """Pop the text keys from ``arguments`` (a checked ``dataset`` mapping) and build dataset options
    and the collate function as llm-foundry's text loader does."""
    options = {key: arguments.pop(key) for key in TEXT_KEYS if key in arguments}
    if "max_seq_len" not in options:
        raise ConfigError(
            "train_loader.dataset.max_seq_len: expected it with llm-foundry's text keys (tokens per "
            f"sample), found only {sorted(options)}; add e.g. max_seq_len: 2048"
        )
    seq_parallel = options.pop("seq_parallel_replication", 1) or 1
    if isinstance(seq_parallel, bool) or not isinstance(seq_parallel, int) or seq_parallel < 1:
        raise ConfigError(
            f"train_loader.dataset.seq_parallel_replication: expected an int >= 1 (the ranks of one "
            f"sequence-parallel group), found {seq_parallel!r}; set it to the sequence-parallel degree"
        )
    eos_token_id, bos_token_id = options.pop("eos_token_id", None), options.pop("bos_token_id", None)
    for name, given in (("eos_token_id", eos_token_id), ("bos_token_id", bos_token_id)):
        override = bool(options.pop(f"override_{name.removesuffix('_id')}_id_mismatch_error", False))
        _check_special_token(name, given, tokenizer, override)
    mlm_probability = options.pop("mlm_probability", None)
    text_tokenizer = None if tokenizer is None else as_text_tokenizer(tokenizer)
    # llm-foundry: mlm=mlm_probability is not None, mlm_probability=mlm_probability or 0
    masking = None if mlm_probability is None else mlm_collator(tokenizer, mlm_probability or 0)
    collate = TextCollator.for_tokenizer(
        text_tokenizer, eos_token_id=eos_token_id, bos_token_id=bos_token_id, masking=masking
    )
    return TextParts(
        dataset_options={**options, "tokenizer": text_tokenizer},
        collate_fn=collate,
        seq_parallel_replication=seq_parallel,
    )


def num_tokens_in_batch(batch: Any) -> int | dict[str, int]:
    """Tokens in a text batch, as llm-foundry's DataSpec counts them (Composer's token clock)."""
    if isinstance(batch, Mapping) and "total_tokens" in batch and "loss_generating_tokens" in batch:
        return {"total": sum(batch["total_tokens"]), "loss_generating": sum(batch["loss_generating_tokens"])}
    if isinstance(batch, Mapping) and "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    if isinstance(batch, Mapping) and "input_ids" in batch:
        return int(batch["input_ids"].numel())
    raise ConfigError(
        f"get_num_tokens_in_batch: expected a batch dict with input_ids or attention_mask, found "
        f"{type(batch).__name__}"
    )
