"""The ``sample_table`` hook: a subclass says what one sample is, and the dataset's plan follows it."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from stream_plugin import StreamingDataset
from stream_plugin.errors import StateError
from stream_plugin.reading.dataset_plan import SampleTable, StreamSamples
from stream_plugin.reading.shard_table import ShardTable


class WithoutLastShard(StreamingDataset):
    """The stored samples but those of the last shard (one stream: the ids of the others stay)."""

    def sample_table(self, streams: StreamSamples) -> SampleTable:
        counts = streams.samples.table.samples_per_shard.copy()
        counts[-1] = 0
        return SampleTable(ShardTable.from_counts([counts]), f"{streams.samples.fingerprint}:without-last-shard")


def _build(cls: type[StreamingDataset], remote: Path, cache: Path) -> StreamingDataset:
    return cls(remote=remote.as_uri(), local=str(cache), batch_size=4, shuffle=True, shuffle_seed=3)


def test_the_order_is_planned_over_the_table_the_hook_returns(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _build(WithoutLastShard, remote_1k, tmp_path)
    last_shard = int(dataset.plan.shards.samples_per_shard[-1])
    assert dataset.plan.shards.num_samples == 1000  # what the shards hold, as their index lists it
    assert dataset.num_samples == dataset.epoch_size == 1000 - last_shard
    ids = sorted(int(sample["id"]) for sample in dataset)
    assert ids == list(range(1000 - last_shard))


def test_the_hooks_fingerprint_names_the_definition_in_the_resume_state(remote_1k: Path, tmp_path: Path) -> None:
    plain = _build(StreamingDataset, remote_1k, tmp_path)
    defined = _build(WithoutLastShard, remote_1k, tmp_path)
    state = defined.state_dict()
    assert state["fingerprint"] == f"{plain.state_dict()['fingerprint']}:without-last-shard"
    with pytest.raises(StateError, match="resume state: expected fingerprint"):
        defined.load_state_dict(plain.state_dict())


def test_a_pickled_dataset_keeps_its_plan_and_reads_again(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _build(WithoutLastShard, remote_1k, tmp_path)
    assert dataset[0]["id"] == 0  # this process's shard readers are open now
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy.plan.fingerprint == dataset.plan.fingerprint
    assert copy.num_samples == dataset.num_samples
    assert [int(sample["id"]) for sample in copy] == [int(sample["id"]) for sample in dataset]
