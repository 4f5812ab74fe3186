"""StreamingDataset's MosaicML-compatible surface: random access, sizes, inspection, mixing, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stream_plugin import ConfigError, Stream, StreamingDataset


def local_dataset(remote: Path, tmp_path: Path, **kwargs: Any) -> StreamingDataset:
    return StreamingDataset(remote=f"file://{remote}", local=str(tmp_path / "cache"), batch_size=4, **kwargs)


def test_random_access_takes_ints_negative_ints_slices_lists_and_arrays(
    remote_1k: Path, tmp_path: Path
) -> None:
    dataset = local_dataset(remote_1k, tmp_path)
    assert dataset[7]["id"] == 7
    assert dataset[-1]["id"] == 999
    assert [s["id"] for s in dataset[10:16:2]] == [10, 12, 14]
    assert [s["id"] for s in dataset[[3, 1]]] == [3, 1]
    assert [s["id"] for s in dataset[np.array([5, 998])]] == [5, 998]
    with pytest.raises(IndexError, match="sample index 1000 is out of range for a dataset of 1000 samples"):
        dataset[1000]


def test_random_access_downloads_the_shard_on_demand(remote_1k: Path, tmp_path: Path) -> None:
    dataset = local_dataset(remote_1k, tmp_path)
    assert not list((tmp_path / "cache").glob("shard.*.mds"))
    assert dataset[500]["id"] == 500
    assert len(list((tmp_path / "cache").glob("shard.*.mds"))) == 1


def test_prepare_shard_downloads_one_shard(remote_1k: Path, tmp_path: Path) -> None:
    dataset = local_dataset(remote_1k, tmp_path)
    dataset.prepare_shard(3)
    assert (tmp_path / "cache" / dataset.shards[3].raw_data.basename).exists()


def test_inspection_attributes_follow_the_seeds_faq(mix_remote: list[Path], tmp_path: Path) -> None:
    streams = [Stream(remote=f"file://{folder}", local=str(tmp_path / folder.name)) for folder in mix_remote]
    dataset = StreamingDataset(streams=streams, batch_size=4)
    assert dataset.samples_per_stream.tolist() == [100, 200]
    assert dataset.shards_per_stream.sum() == len(dataset.samples_per_shard)
    assert dataset.samples_per_shard.sum() == 300
    # The FAQ's walk: global sample -> (stream, shard in stream, sample in shard).
    for sample_id in (0, 99, 100, 299):
        shard_id, offset = dataset.spanner[sample_id]
        stream_id = dataset.stream_per_shard[shard_id]
        relative_shard = shard_id - dataset.shard_offset_per_stream[stream_id]
        assert stream_id == (0 if sample_id < 100 else 1)
        assert 0 <= relative_shard < dataset.shards_per_stream[stream_id]
        assert dataset[sample_id]["id"] == sample_id
        assert offset < dataset.samples_per_shard[shard_id]


def test_inspection_arrays_are_read_only_views(mix_remote: list[Path], tmp_path: Path) -> None:
    streams = [Stream(remote=f"file://{folder}", local=str(tmp_path / folder.name)) for folder in mix_remote]
    for dataset in (
        StreamingDataset(streams=streams, batch_size=4),
        StreamingDataset(streams=streams[:1], batch_size=4),
    ):
        for name in (
            "stream_per_shard",
            "shards_per_stream",
            "samples_per_shard",
            "samples_per_stream",
            "shard_offset_per_stream",
        ):
            array = getattr(dataset, name)
            with pytest.raises(ValueError, match="read-only"):
                array[0] = 12345
        assert dataset.samples_per_shard.sum() == dataset.num_samples


def test_epoch_size_len_and_size_follow_the_seeds_faq(
    mix_remote: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    streams = [
        Stream(remote=f"file://{mix_remote[0]}", local=str(tmp_path / "a"), repeat=3),
        Stream(remote=f"file://{mix_remote[1]}", local=str(tmp_path / "b"), repeat=0.5),
    ]
    dataset = StreamingDataset(streams=streams, batch_size=10)
    assert dataset.size() == 300  # unique samples
    assert dataset.epoch_size == 400  # 3 x 100 + 0.5 x 200
    assert len(dataset) == 200  # per device: epoch_size / 2 devices (20 global batches of 20)


def mixed_ids(streams: list[Stream], tmp_path: Path, **kwargs: Any) -> list[int]:
    dataset = StreamingDataset(streams=streams, batch_size=5, **kwargs)
    return [sample["id"] for sample in dataset]


@pytest.mark.parametrize(
    ("weights", "epoch_size", "expected"),
    [
        ([{"proportion": 0.25}, {"proportion": 0.75}], None, (75, 225)),
        ([{"proportion": 0.25}, {"proportion": 0.75}], 400, (100, 300)),
        ([{"proportion": 2}, {"proportion": 6}], None, (75, 225)),
        ([{"repeat": 3}, {}], None, (300, 200)),
        ([{"repeat": 0.25}, {}], None, (25, 200)),
        ([{"choose": 250}, {}], None, (250, 200)),
    ],
)
def test_mixing_gives_the_seeds_counts(
    mix_remote: list[Path],
    tmp_path: Path,
    weights: list[dict[str, float]],
    epoch_size: int | None,
    expected: tuple[int, int],
) -> None:
    streams = [
        Stream(remote=f"file://{folder}", local=str(tmp_path / folder.name), **weight)
        for folder, weight in zip(mix_remote, weights)
    ]
    ids = np.array(mixed_ids(streams, tmp_path, epoch_size=epoch_size))
    padding = len(ids) - sum(expected)
    assert 0 <= padding < 5  # the last global batch is padded, never by a whole batch
    real = ids[: sum(expected)] if padding == 0 else ids
    from_a = int((real < 100).sum())
    from_b = int((real >= 100).sum())
    assert abs(from_a - expected[0]) + abs(from_b - expected[1]) == padding


def test_mixing_schemes_across_streams_is_an_error(mix_remote: list[Path], tmp_path: Path) -> None:
    streams = [
        Stream(remote=f"file://{mix_remote[0]}", local=str(tmp_path / "a"), proportion=0.5),
        Stream(remote=f"file://{mix_remote[1]}", local=str(tmp_path / "b"), choose=10),
    ]
    with pytest.raises(ConfigError, match="proportion"):
        StreamingDataset(streams=streams, batch_size=4)


def test_subclass_get_item_transforms_iterated_and_indexed_samples(remote_1k: Path, tmp_path: Path) -> None:
    class Doubled(StreamingDataset):
        def get_item(self, sample_id: int) -> Any:
            sample = super().get_item(sample_id)
            return {"id": sample["id"] * 2}

    dataset = Doubled(remote=f"file://{remote_1k}", local=str(tmp_path / "cache"), batch_size=4)
    assert dataset[21] == {"id": 42}
    assert sorted(sample["id"] for sample in dataset) == list(range(0, 2000, 2))


def test_natural_epoch_covers_every_sample_exactly_once(remote_1k: Path, tmp_path: Path) -> None:
    dataset = local_dataset(remote_1k, tmp_path, shuffle=True)
    ids = [sample["id"] for sample in dataset]
    assert sorted(ids) == list(range(1000))
    assert ids != list(range(1000))


def test_every_epoch_reshuffles(remote_1k: Path, tmp_path: Path) -> None:
    dataset = local_dataset(remote_1k, tmp_path, shuffle=True)
    first = [sample["id"] for sample in dataset]
    second = [sample["id"] for sample in dataset]
    assert sorted(first) == sorted(second) and first != second


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shuffle_algo": "py9"}, "shuffle_algo: expected one of"),
        ({"batching_method": "zigzag"}, "batching_method: expected one of"),
        ({"sampling_method": "lucky"}, "sampling_method: expected one of"),
        ({"batch_size": 0}, "batch_size: expected a positive int or None, found 0"),
        ({"epoch_size": "10x"}, "epoch_size: expected a number"),
        ({"cache_limit": "lots"}, "cache_limit: expected"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(
    remote_1k: Path, tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    arguments = {"remote": f"file://{remote_1k}", "local": str(tmp_path / "cache"), "batch_size": 4, **kwargs}
    with pytest.raises(ConfigError, match=message):
        StreamingDataset(**arguments)


def test_streams_and_remote_together_is_an_error(remote_1k: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected either streams or remote/local, found both"):
        StreamingDataset(streams=[Stream(local=str(remote_1k))], remote=f"file://{remote_1k}")


def test_a_local_only_dataset_reads_in_place(remote_1k: Path) -> None:
    dataset = StreamingDataset(local=str(remote_1k), batch_size=4)
    assert sorted(sample["id"] for sample in dataset) == list(range(1000))


def test_an_abandoned_pass_neither_hangs_the_next_pass_nor_the_process(
    remote_1k: Path, tmp_path: Path
) -> None:
    # Lightning's sanity check abandons a validation pass; prefetch threads once deadlocked on the
    # shard locks of readers the abandoned pass still held.
    script = f"""
from stream_plugin import StreamingDataset
dataset = StreamingDataset(remote="file://{remote_1k}", local="{tmp_path / "cache"}", batch_size=4, shuffle=True)
passes = iter(dataset)
for _ in range(5):
    next(passes)
passes.close()
assert sorted(sample["id"] for sample in dataset) == list(range(1000))
half = iter(dataset)
next(half)  # left open at exit
print("done")
"""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
