"""A remote rewritten under a warm cache, and states that no run over this dataset could have saved."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.datasets import write_ids

from stream_plugin import StreamingDataset
from stream_plugin.errors import RemoteChangedError, StateError


def rewrite_with_the_same_bytes(remote: Path) -> None:
    """Every file replaced by an identical copy: same names, sizes and index bytes, a new write."""
    for path in sorted(remote.iterdir()):
        copy = path.with_name(f".{path.name}.new")
        copy.write_bytes(path.read_bytes())
        os.replace(copy, path)


def test_a_state_saved_before_the_remote_was_rewritten_is_refused(tmp_path: Path) -> None:
    remote = write_ids(tmp_path / "remote", range(200))
    first = StreamingDataset(remote=str(remote), local=str(tmp_path / "cache"), batch_size=10, shuffle=True)
    seen = [sample["id"] for _, sample in zip(range(30), first)]
    assert len(seen) == 30
    state = first.state_dict(30)
    rewrite_with_the_same_bytes(remote)
    with pytest.raises(RemoteChangedError, match="found it rewritten .* Delete .*cache"):
        StreamingDataset(remote=str(remote), local=str(tmp_path / "cache"), batch_size=10, shuffle=True)
    fresh = StreamingDataset(remote=str(remote), local=str(tmp_path / "cache2"), batch_size=10, shuffle=True)
    with pytest.raises(StateError, match="expected fingerprint .* the data or a setting that shapes the order"):
        fresh.load_state_dict(state)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> StreamingDataset:
    remote = write_ids(tmp_path_factory.mktemp("remote") / "data", range(100))
    return StreamingDataset(local=str(remote), batch_size=10)


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_canonical_nodes", 10**12), ("epoch_batch_size", 10**30), ("sample_in_epoch", 10**18)],
)
def test_tampered_state_counts_are_refused_before_any_allocation(
    dataset: StreamingDataset, field: str, value: int
) -> None:
    state: dict[str, Any] = {**dataset.state_dict(), field: value}
    for strict in (True, False):
        with pytest.raises(StateError, match=rf"expected {field} at most \d+ \(this dataset has 100 samples"):
            dataset.load_state_dict(state, strict=strict)


def test_a_tampered_epoch_is_refused(dataset: StreamingDataset) -> None:
    with pytest.raises(StateError, match=r"expected epoch at most \d+, found 10+; the checkpoint is corrupt"):
        dataset.load_state_dict({**dataset.state_dict(), "epoch": 10**30})


@pytest.mark.parametrize("obj", [5, "state", [1, 2]])
def test_a_state_that_is_not_a_dict_is_refused_even_when_not_strict(dataset: StreamingDataset, obj: Any) -> None:
    with pytest.raises(StateError, match="resume state: expected a dict \\(from state_dict\\(\\)\\), found"):
        dataset.load_state_dict(obj, strict=False)
