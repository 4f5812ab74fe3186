import io
from pathlib import Path

import pytest
import torch

from stream_plugin import MDSWriter, StreamingDataset, resume_state_at
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


# ---------------------------------------------------------------------------------------- resume_state_at
@pytest.fixture
def dataset(tmp_path: Path) -> StreamingDataset:
    """102 samples read with a device batch of 4 on one rank: a global batch of 4."""
    with MDSWriter(out=str(tmp_path / "data"), columns={"id": "int"}, size_limit=200) as writer:
        for sample in range(102):
            writer.write({"id": sample})
    return StreamingDataset(local=str(tmp_path / "data"), batch_size=4)


def test_resume_state_at_the_datasets_own_position_is_its_own_state(dataset: StreamingDataset) -> None:
    # Resumed mid-epoch 0 on an order built for a global batch of 8: only the dataset knows that size.
    dataset.load_state_dict({**dataset.state_dict(), "sample_in_epoch": 16, "epoch_batch_size": 8})
    own = ResumeState.from_dict(dataset.state_dict(16))
    assert own.epoch_batch_size == 8
    assert resume_state_at(dataset, 0, 16) == own


def test_resume_state_at_takes_the_trainers_position_where_the_loader_is_elsewhere(
    dataset: StreamingDataset,
) -> None:
    state = resume_state_at(dataset, 2, 8)  # the dataset has not started epoch 2
    own = ResumeState.from_dict(dataset.state_dict(8))
    assert (state.epoch, state.sample_in_epoch, state.epoch_batch_size) == (2, 8, 4)
    assert (state.num_canonical_nodes, state.shuffle_seed, state.fingerprint) == (
        own.num_canonical_nodes,
        own.shuffle_seed,
        own.fingerprint,
    )


def test_resume_state_at_keeps_a_given_epoch_batch_size_and_cuts_a_count_past_the_epoch(
    dataset: StreamingDataset,
) -> None:
    state = resume_state_at(dataset, 1, 104, epoch_batch_size=8)  # counted with rank-balance repeats
    assert (state.epoch, state.sample_in_epoch, state.epoch_batch_size) == (1, 102, 8)
    assert dataset.samples_in_epoch(8) == 102
