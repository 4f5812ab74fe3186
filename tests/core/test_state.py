import io

import pytest
import torch

from stream_plugin.errors import StateError
from stream_plugin.reading.state import ResumeState, fingerprint

STATE = ResumeState(
    epoch=2, sample_in_epoch=96, epoch_batch_size=32, num_canonical_nodes=4, shuffle_seed=7, fingerprint="abc"
)


def test_state_round_trips_through_a_plain_dict() -> None:
    assert ResumeState.from_dict(STATE.to_dict()) == STATE


def test_state_dict_loads_with_torch_weights_only() -> None:
    buffer = io.BytesIO()
    torch.save({"data": STATE.to_dict()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    assert ResumeState.from_dict(loaded["data"]) == STATE


def test_state_holds_only_ints_and_strs() -> None:
    assert all(type(value) in (int, str) for value in STATE.to_dict().values())


def test_state_from_mosaicml_is_explained() -> None:
    legacy = {"epoch": 1, "sample_in_epoch": 10, "num_canonical_nodes": 2, "shuffle_seed": 9176}
    with pytest.raises(StateError, match="written by MosaicML Streaming .* pass strict=False"):
        ResumeState.from_dict(legacy)


def test_state_with_unknown_version_is_refused() -> None:
    with pytest.raises(StateError, match="expected version 2, found 99"):
        ResumeState.from_dict({**STATE.to_dict(), "version": 99})


def test_a_state_from_before_shards_stayed_on_their_node_is_refused_mid_epoch() -> None:
    """Version 1 drew a new shard order every epoch: its mid-epoch position points into an old order."""
    written_before = {**STATE.to_dict(), "version": 1}
    with pytest.raises(
        StateError,
        match=r"found version 1 at sample 96 of epoch 2\. It was written before shards stayed on their "
        r"canonical node across epochs.*start the epoch afresh \(set sample_in_epoch to 0 in the state\), "
        r"or finish this epoch with the stream_plugin version that wrote the checkpoint",
    ):
        ResumeState.from_dict(written_before)


def test_a_state_from_before_shards_stayed_on_their_node_resumes_at_an_epoch_start() -> None:
    at_epoch_start = {**STATE.to_dict(), "version": 1, "sample_in_epoch": 0}
    state = ResumeState.from_dict(at_epoch_start)
    assert (state.version, state.epoch, state.sample_in_epoch) == (2, 2, 0)
    assert state.to_dict()["version"] == 2


def test_state_missing_keys_are_named() -> None:
    state = STATE.to_dict()
    del state["epoch_batch_size"]
    with pytest.raises(StateError, match=r"expected keys \['epoch_batch_size'\]"):
        ResumeState.from_dict(state)


def test_state_rejects_negative_positions() -> None:
    with pytest.raises(StateError, match="sample_in_epoch >= 0"):
        ResumeState.from_dict({**STATE.to_dict(), "sample_in_epoch": -1})


def test_fingerprint_changes_with_any_part() -> None:
    base = {"seed": 1, "streams": ["a"]}
    assert fingerprint(base) == fingerprint(dict(reversed(base.items())))
    assert fingerprint(base) != fingerprint({**base, "seed": 2})
