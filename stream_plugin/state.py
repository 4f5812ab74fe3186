"""The resume state: a few plain values that pin a position in the global sample order.

Resuming recomputes the order from these values; no data is replayed. The dict form holds only ints
and strs, so it loads under ``torch.load(weights_only=True)`` and fits any checkpoint format.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from stream_plugin.errors import StateError

STATE_VERSION = 1
_INT_FIELDS = ("epoch", "sample_in_epoch", "epoch_batch_size", "num_canonical_nodes", "shuffle_seed")
# Keys MosaicML Streaming 0.13 writes; a state with only these came from that library.
_MOSAICML_KEYS = {"epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed"}


@dataclass(frozen=True)
class ResumeState:
    """Position ``sample_in_epoch`` (global samples consumed) in epoch ``epoch``.

    ``epoch_batch_size`` is the global batch size the epoch's order was built with; it lets a run that
    changed its global batch size finish the epoch without skipping or repeating samples.
    ``fingerprint`` identifies the data and every setting that shapes the order.
    """

    epoch: int
    sample_in_epoch: int
    epoch_batch_size: int
    num_canonical_nodes: int
    shuffle_seed: int
    fingerprint: str
    version: int = STATE_VERSION

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise StateError(f"resume state: expected {name} to be an int, found {value!r}")
        if self.epoch < 0 or self.sample_in_epoch < 0:
            raise StateError(
                f"resume state: expected epoch >= 0 and sample_in_epoch >= 0, found {self.epoch} and "
                f"{self.sample_in_epoch}"
            )
        if self.epoch_batch_size < 1 or self.num_canonical_nodes < 1:
            raise StateError(
                f"resume state: expected epoch_batch_size >= 1 and num_canonical_nodes >= 1, found "
                f"{self.epoch_batch_size} and {self.num_canonical_nodes}"
            )

    def to_dict(self) -> dict[str, int | str]:
        return dict(asdict(self))

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> ResumeState:
        """Validate a dict written by ``to_dict``; explain states from other libraries or versions."""
        if not isinstance(state, Mapping):
            raise StateError(f"resume state: expected a dict, found {type(state).__name__}")
        if "version" not in state and set(state) >= _MOSAICML_KEYS:
            raise StateError(
                "resume state: expected a stream_plugin state, found one written by MosaicML Streaming "
                f"(keys {sorted(state)}); its sample order differs from ours, so an exact resume is "
                "impossible. Start the epoch afresh, or pass strict=False to continue at the same epoch "
                "and sample count in this library's order"
            )
        version = state.get("version")
        if version != STATE_VERSION:
            raise StateError(
                f"resume state: expected version {STATE_VERSION}, found {version!r}; it was written by an "
                "incompatible version of stream_plugin"
            )
        missing = [name for name in (*_INT_FIELDS, "fingerprint") if name not in state]
        if missing:
            raise StateError(f"resume state: expected keys {missing}, found only {sorted(state)}")
        fingerprint = state["fingerprint"]
        if not isinstance(fingerprint, str):
            raise StateError(f"resume state: expected fingerprint to be a str, found {fingerprint!r}")
        return cls(**{name: state[name] for name in _INT_FIELDS}, fingerprint=fingerprint)


def fingerprint(parts: Mapping[str, Any]) -> str:
    """A short stable digest of JSON-able ``parts`` (index digests and order-shaping settings)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
