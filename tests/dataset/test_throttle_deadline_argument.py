"""``StreamingDataset(throttle_deadline=...)`` reaches every stream that sets none of its own."""

from __future__ import annotations

from pathlib import Path

from support.datasets import write_ids

from stream_plugin import Stream, StreamingDataset


def test_the_datasets_throttle_deadline_is_every_streams_default(tmp_path: Path) -> None:
    first = write_ids(tmp_path / "a", range(10))
    second = write_ids(tmp_path / "b", range(10, 20))
    dataset = StreamingDataset(
        streams=[Stream(local=str(first)), Stream(local=str(second), throttle_deadline=5.0)],
        batch_size=1,
        throttle_deadline=60.0,
    )
    assert [stream.throttle_deadline for stream in dataset.streams] == [60.0, 5.0]


def test_without_one_the_default_deadline_holds(tmp_path: Path) -> None:
    from stream_plugin.storage.download_settings import DEFAULT_THROTTLE_DEADLINE

    dataset = StreamingDataset(local=str(write_ids(tmp_path / "a", range(10))), batch_size=1)
    assert dataset.streams[0].throttle_deadline == DEFAULT_THROTTLE_DEADLINE == 900
