"""The names MosaicML Streaming 0.13 users call on a dataset, and the checks its constructor makes."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
from support.datasets import write_ids
from torch.utils.data import DataLoader

from stream_plugin import EmptyStreamError, Stream, StreamingDataset, UnsafeTypeError
from stream_plugin.errors import ConfigError
from stream_plugin.format.writer import MDSWriter


def _dataset(remote: Path, local: Path, **kwargs: object) -> StreamingDataset:
    return StreamingDataset(remote=str(remote), local=str(local), **kwargs)  # type: ignore[arg-type]


def test_num_shards_counts_every_streams_shards(mix_remote: list[Path], tmp_path: Path) -> None:
    streams = [Stream(remote=str(folder), local=str(tmp_path / folder.name)) for folder in mix_remote]
    dataset = StreamingDataset(streams=streams)
    assert dataset.num_shards == len(dataset.shards) == int(dataset.shards_per_stream.sum()) > 2


def test_size_is_a_property_that_can_also_be_called(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _dataset(remote_1k, tmp_path / "cache")
    assert dataset.size == 1000
    assert dataset.size() == 1000
    assert dataset.size + 1 == 1001


def test_next_epoch_reads_and_sets_the_epoch_of_the_next_pass(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _dataset(remote_1k, tmp_path / "cache", batch_size=100, shuffle=True)
    assert dataset.next_epoch == 0
    first = [sample["id"] for sample in dataset]
    assert dataset.next_epoch == 1
    dataset.next_epoch = 0
    assert [sample["id"] for sample in dataset] == first


def test_cache_usage_counts_the_index_and_the_shards_on_disk(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _dataset(remote_1k, tmp_path / "cache", batch_size=10)
    index_bytes = (tmp_path / "cache" / "index.json").stat().st_size
    assert dataset.cache_usage == index_bytes
    dataset.prepare_shard(0)
    assert dataset.cache_usage == index_bytes + dataset.shards[0].raw_data.bytes


def test_evict_shard_deletes_a_cached_shard_and_frees_its_bytes(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _dataset(remote_1k, tmp_path / "cache", batch_size=10)
    assert dataset[0]["id"] == 0  # downloads shard 0 and keeps a reader open
    before = dataset.cache_usage
    freed = dataset.evict_shard(0)
    assert freed == dataset.shards[0].raw_data.bytes
    assert dataset.cache_usage == before - freed
    assert not (tmp_path / "cache" / dataset.shards[0].raw_data.basename).exists()
    assert dataset[0]["id"] == 0  # downloaded again on demand


def test_evict_coldest_shard_evicts_the_least_recently_used(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _dataset(remote_1k, tmp_path / "cache", batch_size=10)
    for shard_id in (2, 0, 1):
        dataset.prepare_shard(shard_id)
    dataset.evict_coldest_shard()
    remaining = {path.name for path in (tmp_path / "cache").glob("shard.*")}
    assert dataset.shards[2].raw_data.basename not in remaining
    assert {dataset.shards[0].raw_data.basename, dataset.shards[1].raw_data.basename} <= remaining


def test_evict_coldest_shard_with_nothing_cached_says_so(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _dataset(remote_1k, tmp_path / "cache")
    with pytest.raises(ConfigError, match="evict_coldest_shard: expected a cached shard of a remote stream"):
        dataset.evict_coldest_shard()


def test_evict_shard_refuses_a_local_only_stream(remote_1k: Path) -> None:
    dataset = StreamingDataset(local=str(remote_1k))
    with pytest.raises(
        ConfigError, match="evict: expected a shard of a stream with a remote, found one of the local-only"
    ):
        dataset.evict_shard(0)
    assert (remote_1k / dataset.shards[0].raw_data.basename).is_file()


def test_evict_shard_refuses_an_id_out_of_range(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _dataset(remote_1k, tmp_path / "cache")
    with pytest.raises(ConfigError, match=r"shard_id: expected 0 <= shard_id < \d+ \(num_shards\), found -1"):
        dataset.evict_shard(-1)


def test_stream_weights_are_resolved_after_the_dataset_is_built(
    mix_remote: list[Path], tmp_path: Path
) -> None:
    a = Stream(remote=str(mix_remote[0]), local=str(tmp_path / "a"), proportion=0.25)
    b = Stream(remote=str(mix_remote[1]), local=str(tmp_path / "b"), proportion=0.75)
    StreamingDataset(streams=[a, b])
    assert (a.choose, b.choose) == (75, 225)
    assert (a.proportion, b.proportion) == (0.25, 0.75)
    assert (a.repeat, b.repeat) == (0.75, 1.125)


def test_stream_weights_of_an_unweighted_mix_are_resolved_too(mix_remote: list[Path], tmp_path: Path) -> None:
    a = Stream(remote=str(mix_remote[0]), local=str(tmp_path / "a"))
    b = Stream(remote=str(mix_remote[1]), local=str(tmp_path / "b"), repeat=2)
    assert a.choose is None
    StreamingDataset(streams=[a, b])
    assert (a.choose, b.choose) == (100, 400)
    assert (a.repeat, b.repeat) == (1.0, 2.0)
    assert a.proportion == pytest.approx(0.2)


def test_partition_algo_orig_is_accepted_with_a_warning(remote_1k: Path, tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="partition_algo='orig' is accepted for compatibility and ignored"):
        _dataset(remote_1k, tmp_path / "cache", partition_algo="orig")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _dataset(remote_1k, tmp_path / "cache", partition_algo="relaxed")


def test_partition_algo_unknown_is_refused(remote_1k: Path, tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"partition_algo: expected one of \['orig', 'relaxed'\], found 'fast'"
    ):
        _dataset(remote_1k, tmp_path / "cache", partition_algo="fast")


def test_unsafe_columns_are_refused_when_the_dataset_is_built(tmp_path: Path) -> None:
    with MDSWriter(out=str(tmp_path / "pickled"), columns={"obj": "pkl"}) as writer:
        writer.write({"obj": {"a": 1}})
    with pytest.raises(UnsafeTypeError, match=r"column\(s\) \['obj'\] use an unsafe encoding \(pkl\)"):
        StreamingDataset(local=str(tmp_path / "pickled"))
    dataset = StreamingDataset(local=str(tmp_path / "pickled"), allow_unsafe_types=True)
    assert dataset[0] == {"obj": {"a": 1}}


def test_an_index_with_no_shards_is_refused(tmp_path: Path) -> None:
    with MDSWriter(out=str(tmp_path / "empty"), columns={"id": "int"}):
        pass
    with pytest.raises(EmptyStreamError, match="expected a stream with at least one sample, found 0 shard"):
        StreamingDataset(local=str(tmp_path / "empty"))


def test_dataloader_workers_without_batch_size_are_refused(remote_1k: Path, tmp_path: Path) -> None:
    dataset = _dataset(remote_1k, tmp_path / "cache")
    loader = DataLoader(dataset, batch_size=4, num_workers=1)
    with pytest.raises(
        ConfigError, match="batch_size: expected the per-device batch size when a DataLoader runs"
    ):
        next(iter(loader))


def test_more_canonical_nodes_than_samples_is_refused(tmp_path: Path) -> None:
    write_ids(tmp_path / "tiny", range(3))
    dataset = StreamingDataset(local=str(tmp_path / "tiny"), num_canonical_nodes=4, batch_size=1)
    with pytest.raises(ConfigError, match=r"num_canonical_nodes: expected at most 3 \(the epoch's samples"):
        list(dataset)


def test_the_same_local_with_a_different_remote_is_refused(remote_1k: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(remote_1k, other)
    _dataset(remote_1k, tmp_path / "cache")
    with pytest.raises(ConfigError, match="two remotes cannot share one local folder"):
        _dataset(other, tmp_path / "cache")


def test_a_non_int_shuffle_block_size_is_a_type_error_as_in_mosaicml(remote_1k: Path, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="shuffle_block_size: expected a positive int or None, found str '4k'"):
        _dataset(remote_1k, tmp_path / "cache", shuffle_block_size="4k")
