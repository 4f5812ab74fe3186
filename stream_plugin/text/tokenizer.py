"""Tokenizers for text columns: a Hugging Face ``transformers`` tokenizer, a ``tokenizers.Tokenizer``,
or the path of a ``tokenizer.json``, all behind one small interface.

``encode`` does what llm-foundry's text loader asks of its tokenizer: tokenize, truncate to
``max_seq_len`` and pad to exactly ``max_seq_len`` (``truncation=True, padding="max_length"``), with an
attention mask that is 1 on tokens and 0 on padding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from stream_plugin.errors import ConfigError, MissingDependencyError

PaddingSide = Literal["left", "right"]


class TextTokenizer(Protocol):
    """What the text datasets and collators need from a tokenizer."""

    @property
    def pad_token_id(self) -> int | None: ...
    @property
    def padding_side(self) -> PaddingSide: ...
    @property
    def eos_token_id(self) -> int | None: ...
    @property
    def bos_token_id(self) -> int | None: ...

    def encode(self, text: str, max_seq_len: int) -> dict[str, list[int]]:
        """``input_ids`` and ``attention_mask`` (and whatever else the tokenizer returns), each exactly
        ``max_seq_len`` long."""
        ...


def _no_pad_token(what: str, fix: str) -> ConfigError:
    return ConfigError(
        f"tokenizer: expected a padding token to pad text samples to max_seq_len, found none on {what}; {fix}"
    )


@dataclass
class HuggingFaceTokenizer:
    """A ``transformers`` tokenizer (what llm-foundry passes to a loader builder), called as llm-foundry
    calls it."""

    tokenizer: Any

    @property
    def pad_token_id(self) -> int | None:
        return getattr(self.tokenizer, "pad_token_id", None)

    @property
    def padding_side(self) -> PaddingSide:
        return "left" if getattr(self.tokenizer, "padding_side", "right") == "left" else "right"

    @property
    def eos_token_id(self) -> int | None:
        return getattr(self.tokenizer, "eos_token_id", None)

    @property
    def bos_token_id(self) -> int | None:
        return getattr(self.tokenizer, "bos_token_id", None)

    def encode(self, text: str, max_seq_len: int) -> dict[str, list[int]]:
        if getattr(self.tokenizer, "pad_token", None) is None:
            raise _no_pad_token(
                type(self.tokenizer).__name__,
                "set one (e.g. tokenizer.pad_token = tokenizer.eos_token) or write pre-tokenized `tokens`",
            )
        encoded = self.tokenizer(text, truncation=True, padding="max_length", max_length=max_seq_len)
        return {key: list(value) for key, value in dict(encoded).items()}


@dataclass
class FastTokenizer:
    """A ``tokenizers.Tokenizer``; its padding settings (``enable_padding``) give the pad token and side."""

    tokenizer: Any
    _configured: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def _padding(self) -> dict[str, Any] | None:
        padding = self.tokenizer.padding
        return None if padding is None else dict(padding)

    @property
    def pad_token_id(self) -> int | None:
        padding = self._padding
        return None if padding is None else int(padding["pad_id"])

    @property
    def padding_side(self) -> PaddingSide:
        padding = self._padding
        return "left" if padding is not None and padding.get("direction") == "left" else "right"

    # A bare tokenizers.Tokenizer does not say which of its tokens ends or starts a sequence.
    @property
    def eos_token_id(self) -> int | None:
        return None

    @property
    def bos_token_id(self) -> int | None:
        return None

    def encode(self, text: str, max_seq_len: int) -> dict[str, list[int]]:
        encoding = self._fixed_length(max_seq_len).encode(text)
        return {"input_ids": list(encoding.ids), "attention_mask": list(encoding.attention_mask)}

    def _fixed_length(self, max_seq_len: int) -> Any:
        """A copy that truncates and pads to ``max_seq_len`` itself, so truncation keeps the special tokens
        the post-processor adds (as ``transformers``' ``truncation=True`` does)."""
        configured = self._configured.get(max_seq_len)
        if configured is None:
            padding = self._padding
            if padding is None:
                raise _no_pad_token(
                    "this tokenizers.Tokenizer",
                    'call tokenizer.enable_padding(pad_id=..., pad_token="[PAD]") first, or write '
                    "pre-tokenized `tokens`",
                )
            configured = type(self.tokenizer).from_str(self.tokenizer.to_str())
            configured.enable_truncation(max_length=max_seq_len)
            configured.enable_padding(
                direction=padding.get("direction", "right"),
                pad_id=padding["pad_id"],
                pad_type_id=padding.get("pad_type_id", 0),
                pad_token=padding["pad_token"],
                length=max_seq_len,
            )
            self._configured[max_seq_len] = configured
        return configured


def as_text_tokenizer(tokenizer: Any) -> TextTokenizer:
    """Wrap ``tokenizer``: a ``transformers`` tokenizer, a ``tokenizers.Tokenizer``, a ``tokenizer.json``
    path, or an object that already has ``encode(text, max_seq_len)``."""
    if isinstance(tokenizer, (HuggingFaceTokenizer, FastTokenizer)):
        return tokenizer
    if isinstance(tokenizer, (str, Path)):
        return FastTokenizer(_load_tokenizer_file(Path(tokenizer)))
    if type(tokenizer).__module__.startswith("tokenizers"):
        return FastTokenizer(tokenizer)
    if callable(tokenizer) and hasattr(tokenizer, "pad_token_id"):
        return HuggingFaceTokenizer(tokenizer)
    raise ConfigError(
        f"tokenizer: expected a transformers tokenizer, a tokenizers.Tokenizer or the path of a "
        f"tokenizer.json, found {type(tokenizer).__name__}; pass one of those"
    )


def _load_tokenizer_file(path: Path) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError as error:
        raise MissingDependencyError(
            f"tokenizer: expected the `tokenizers` package to load {str(path)!r}, found it missing; "
            'pip install "stream-plugin[text]"'
        ) from error
    if not path.is_file():
        raise ConfigError(f"tokenizer: expected a tokenizer.json file, found nothing at {str(path)!r}")
    return Tokenizer.from_file(str(path))
