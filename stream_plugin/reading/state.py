"""The resume state: a few plain values that pin a position in the global sample order.

Resuming recomputes the order from these values; no data is replayed. The dict form holds only ints
and strs, so it loads under ``torch.load(weights_only=True)`` and fits any checkpoint format.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from stream_plugin.errors import StateError, check_int


class PositionedDataset(Protocol):
    """What ``resume_state_at`` reads of a dataset (``StreamingDataset`` is one)."""

    @property
    def global_batch_size(self) -> int: ...

    def state_dict(self, num_samples: int = 0, from_beginning: bool = True) -> dict[str, int | str]: ...

    def samples_in_epoch(self, global_batch_size: int | None = None) -> int: ...

# 2: shards stay on their canonical node across epochs (each epoch reshuffles only inside a node's
# shards), so a mid-epoch position in a version-1 state points into an order that no longer exists.
STATE_VERSION = 2
_FRESH_SHARD_ORDER_VERSION = 1  # states written while every epoch drew a fresh shard order
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
        for name in _INT_FIELDS:  # plain ints only (a numpy int is stored as one)
            value = check_int(
                f"resume state: {name}",
                getattr(self, name),
                error=StateError,
                fix="the checkpoint is corrupt",
            )
            object.__setattr__(self, name, value)
        if self.epoch < 0 or self.sample_in_epoch < 0:
            raise StateError(
                f"resume state: expected epoch >= 0 and sample_in_epoch >= 0, found {self.epoch} and "
                f"{self.sample_in_epoch}"
            )
        if self.epoch > MAX_EPOCH:
            raise StateError(
                f"resume state: expected epoch at most {MAX_EPOCH}, found {self.epoch}; the checkpoint is "
                "corrupt. Start afresh (load None) or restore another checkpoint"
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
        if version == _FRESH_SHARD_ORDER_VERSION:
            _check_fresh_shard_order_state(state)
            state = {**state, "version": STATE_VERSION}  # at an epoch's start: no old order consumed
            version = STATE_VERSION
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


def resume_state_at(
    dataset: PositionedDataset, epoch: int, sample_in_epoch: int, *, epoch_batch_size: int | None = None
) -> ResumeState:
    """The state that resumes ``dataset`` at global sample ``sample_in_epoch`` of epoch ``epoch``, as a
    trainer counts them.

    A trainer's counters, not the loader's, say what training finished: the loader may have run ahead
    into a batch not trained yet, or into the next epoch, or not have started this one. The dataset
    supplies what the trainer does not know: canonical nodes, seed and fingerprint. ``epoch_batch_size``
    is the global batch size the epoch's order was built with, where the caller knows it; by default the
    dataset's own when its position is the same (it knows the size after a batch-size change at an
    epoch's start), else today's global batch size. A count past the epoch's end (a trainer that counts
    rank-balance repeats) is cut to the epoch's samples.
    """
    own = ResumeState.from_dict(dataset.state_dict(sample_in_epoch))
    if epoch_batch_size is None:
        if (own.epoch, own.sample_in_epoch) == (epoch, sample_in_epoch):
            return own
        epoch_batch_size = dataset.global_batch_size
    sample_in_epoch = min(sample_in_epoch, dataset.samples_in_epoch(epoch_batch_size))
    return replace(own, epoch=epoch, sample_in_epoch=sample_in_epoch, epoch_batch_size=epoch_batch_size)


def _check_fresh_shard_order_state(state: Mapping[str, Any]) -> None:
    """A version-1 state resumes only at the start of an epoch: nothing of the epoch's old order was read."""
    position = state.get("sample_in_epoch")
    if position == 0:
        return
    epoch = state.get("epoch")
    raise StateError(
        f"resume state: expected version {STATE_VERSION} or a version-1 state at the start of an epoch, "
        f"found version 1 at sample {position!r} of epoch {epoch!r}. It was written before shards stayed on their "
        "canonical node across epochs: that version drew a new shard order every epoch, this one draws it "
        "once per run and reshuffles only inside each node's shards, so the epoch's order changed and "
        "its position cannot be resumed exactly. Resume from a checkpoint taken at an epoch boundary, "
        "start the epoch afresh (set sample_in_epoch to 0 in the state), or finish this epoch with the "
        "stream_plugin version that wrote the checkpoint"
    )


# Counts below this are always accepted: sizing a few arrays by them costs nothing, and a tiny
# dataset may legitimately run with more canonical nodes or a larger batch than it has samples.
PLAUSIBLE_FLOOR = 1 << 16
MAX_EPOCH = 1 << 40


def state_mapping(obj: object) -> Mapping[str, Any]:
    """``obj`` as a state dict, or ``StateError`` (with ``strict=False`` too) before anything reads it."""
    if not isinstance(obj, Mapping):
        raise StateError(
            f"resume state: expected a dict (from state_dict()), found {type(obj).__name__}; pass the "
            "object state_dict() returned, or None to start afresh"
        )
    return obj


def check_against_dataset(state: ResumeState, *, epoch_samples: int, global_batch_size: int) -> None:
    """Refuse counts no run over this dataset could have saved, before any array is sized by them.

    ``epoch_batch_size`` and ``num_canonical_nodes`` may not exceed the larger of the epoch's samples,
    today's global batch size and ``PLAUSIBLE_FLOOR``; ``sample_in_epoch`` may not pass the epoch
    plus one padded batch per stream.
    """
    ceiling = max(epoch_samples, global_batch_size, PLAUSIBLE_FLOOR)
    for name in ("epoch_batch_size", "num_canonical_nodes"):
        value = getattr(state, name)
        if value > ceiling:
            raise StateError(
                f"resume state: expected {name} at most {ceiling} (this dataset has {epoch_samples} samples "
                f"per epoch), found {value}; the checkpoint is corrupt or from another dataset. Start "
                "afresh (load None) or restore the matching checkpoint"
            )
    last = epoch_samples + ceiling * 2  # the epoch plus padding of its last batches
    if state.sample_in_epoch > last:
        raise StateError(
            f"resume state: expected sample_in_epoch at most {last} (this dataset has {epoch_samples} "
            f"samples per epoch), found {state.sample_in_epoch}; the checkpoint is corrupt or from another "
            "dataset. Start afresh (load None) or restore the matching checkpoint"
        )


def fingerprint(parts: Mapping[str, Any]) -> str:
    """A short stable digest of JSON-able ``parts`` (index digests and order-shaping settings)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
