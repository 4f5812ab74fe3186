"""DatasetConfig: the dataset's options in one frozen, validated value, and what derives from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_plugin import Stream, StreamingDataset


def test_fingerprint_is_unchanged_for_the_same_data_and_settings(mix_remote: list[Path]) -> None:
    # Resume states written by earlier versions carry these values: they must keep loading.
    first, second = mix_remote
    plain = StreamingDataset(local=str(first), batch_size=4)
    assert plain.state_dict()["fingerprint"] == "5215232c602b9de2"
    mixed = StreamingDataset(
        streams=[Stream(local=str(first), proportion=0.25), Stream(local=str(second), proportion=0.75)],
        batch_size=4,
        epoch_size="250",
        shuffle=True,
        shuffle_algo="py1br",
        shuffle_seed=7,
        shuffle_block_size=64,
        batching_method="stratified",
        sampling_method="fixed",
        sampling_granularity=2,
    )
    assert mixed.state_dict()["fingerprint"] == "889771cd8877af5b"
    unshuffled = StreamingDataset(local=str(first), batch_size=4, shuffle_algo="py1s", shuffle_seed=3)
    assert unshuffled.state_dict()["fingerprint"] == "88fea6d813a67ad4"


