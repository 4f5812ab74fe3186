"""A Parquet stream keeps every promise of an MDS stream: order, shuffles, batching, mixing, resume,
exact evaluation, the node cache (each shard's byte ranges downloaded once, eviction) and the simulator.

The reference is ``mds_twin``: the same rows as MDS, in shards of the same sample counts.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import TOTAL
from support.resume import assert_resumes_identically

from stream_plugin import EvalLoader, Stream, StreamingDataLoader, StreamingDataset, World
from stream_plugin.order.shuffle import shuffle_names


def _ids(dataset: StreamingDataset) -> list[int]:
    return [int(sample["id"]) for sample in dataset]


def _dataset(remote: Path, local: Path, **kwargs: Any) -> StreamingDataset:
    options = {"batch_size": 8, "num_canonical_nodes": 2, "shuffle": True, **kwargs}
    return StreamingDataset(remote=str(remote), local=str(local), **options)


@pytest.mark.parametrize("shuffle_algo", shuffle_names())
def test_each_shuffle_orders_a_parquet_stream_as_the_mds_twin(
    parquet_dir: Path, mds_twin: Path, tmp_path: Path, shuffle_algo: str
) -> None:
    found = _ids(_dataset(parquet_dir, tmp_path / "a", shuffle_algo=shuffle_algo, shuffle_block_size=120))
    expected = _ids(_dataset(mds_twin, tmp_path / "b", shuffle_algo=shuffle_algo, shuffle_block_size=120))
    assert found == expected
    assert sorted(found) == list(range(TOTAL))


@pytest.mark.parametrize("batching_method", ["random", "stratified", "per_stream", "device_per_stream"])
def test_a_mix_of_a_parquet_and_an_mds_stream_orders_as_two_mds_streams(
    parquet_dir: Path, mds_twin: Path, tmp_path: Path, batching_method: str
) -> None:
    copy = tmp_path / "mds-copy"
    shutil.copytree(mds_twin, copy)

    def mixed(first: Path, second: Path, cache: str) -> list[int]:
        streams = [
            Stream(remote=str(first), local=str(tmp_path / cache / "1"), proportion=0.5),
            Stream(remote=str(second), local=str(tmp_path / cache / "2"), proportion=0.5),
        ]
        dataset = StreamingDataset(
            streams=streams, batch_size=8, shuffle=True, num_canonical_nodes=2, batching_method=batching_method
        )
        return [int(sample["id"]) for sample in dataset]

    assert mixed(parquet_dir, mds_twin, "pq") == mixed(copy, mds_twin, "mds")


def _loader(remote: Path, local: Path, workers: int) -> Callable[[], StreamingDataLoader]:
    return lambda: StreamingDataLoader(_dataset(remote, local), batch_size=8, num_workers=workers)


def test_resume_mid_epoch_is_exact_also_with_another_worker_count(parquet_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert_resumes_identically(
        [_loader(parquet_dir, cache, 0), _loader(parquet_dir, cache, 2)], cuts=[3, 40], epochs=1
    )


def test_an_evaluation_pass_on_three_ranks_counts_every_row_once(parquet_dir: Path, tmp_path: Path) -> None:
    counted: list[int] = []
    for rank in range(3):
        dataset = StreamingDataset(
            local=str(parquet_dir), batch_size=7, world=World(rank=rank, world_size=3, local_world_size=3, local_rank=rank)
        )
        loader = EvalLoader(dataset, batch_size=7)
        for number, batch in enumerate(loader):
            counted += [int(i) for i in batch["id"][: loader.real_samples(number)]]
    assert sorted(counted) == list(range(TOTAL))


def test_the_node_cache_downloads_each_shards_byte_ranges_once(parquet_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    dataset = _dataset(parquet_dir, cache)
    for _ in range(2):
        assert sorted(_ids(dataset)) == list(range(TOTAL))
    shards = json.loads((parquet_dir / "index.json").read_text())["shards"]
    stats = dataset.node_stats()
    assert stats.shards_downloaded == len(shards)
    assert stats.bytes_downloaded == sum(shard["raw_data"]["bytes"] for shard in shards)
    # each cached shard is its row group's chunks plus the footer: less than its file
    for shard in shards:
        cached = (cache / shard["raw_data"]["basename"]).stat().st_size
        assert cached == shard["raw_data"]["bytes"] < shard["parquet"]["file_bytes"]


def test_columns_download_only_their_chunks_into_their_own_files(parquet_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    whole = _dataset(parquet_dir, cache)
    assert set(whole[3]) == {"id", "text", "score"}
    narrow = _dataset(parquet_dir, cache, columns=["id"])
    assert narrow[3] == {"id": 3}
    first = json.loads((parquet_dir / "index.json").read_text())["shards"][0]
    files = sorted(cache.rglob("shard.00000.parquet"))
    assert len(files) == 2  # one per column set
    sizes = sorted(path.stat().st_size for path in files)
    assert sizes == [first["parquet"]["footer_bytes"] + first["parquet"]["column_bytes"]["id"], first["raw_data"]["bytes"]]


def test_a_missing_column_is_refused_with_the_available_ones(parquet_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"columns: expected names among the Parquet columns \['id', 'text', 'score'\], found \['nope'\] missing"):
        _dataset(parquet_dir, tmp_path / "c", columns=["nope"])


def test_columns_on_an_mds_stream_are_refused(mds_twin: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"columns: expected a Parquet stream \(an index written by index-parquet\), found"):
        _dataset(mds_twin, tmp_path / "c", columns=["id"])


def test_cache_limit_evicts_parquet_shards_and_reads_every_row(parquet_dir: Path, tmp_path: Path) -> None:
    shards = json.loads((parquet_dir / "index.json").read_text())["shards"]
    largest = max(shard["raw_data"]["bytes"] for shard in shards)
    dataset = _dataset(parquet_dir, tmp_path / "cache", cache_limit=4 * largest, shuffle=False)
    assert sorted(_ids(dataset)) == list(range(TOTAL))
    stats = dataset.node_stats()
    assert stats.shards_evicted > 0
    assert sum(path.stat().st_size for path in (tmp_path / "cache").glob("shard.*.parquet")) <= 4 * largest


def test_a_changed_file_is_refused_when_its_shard_is_fetched(parquet_dir: Path, tmp_path: Path) -> None:
    dataset = _dataset(parquet_dir, tmp_path / "cache")
    target = parquet_dir / "part-001.parquet"
    target.write_bytes(target.read_bytes() + b"")  # same bytes, a new file: its identity changes
    with pytest.raises(Exception, match=r"part-001.parquet: expected the Parquet file the index describes .* found it changed"):
        _ids(dataset)


def test_the_simulator_takes_a_parquet_index(parquet_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stream_plugin.cli import main

    assert main(["simulate", str(parquet_dir), "--batch-size", "4", "--devices-per-node", "1", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["inputs"]["data"]["samples"] == TOTAL


def test_an_index_kept_elsewhere_reads_its_shards_from_the_source(parquet_dir: Path, tmp_path: Path) -> None:
    from stream_plugin.parquet import index_parquet

    index_parquet(parquet_dir, out=tmp_path / "my-index", shard_bytes=1)
    remote = _dataset(tmp_path / "my-index", tmp_path / "cache")
    assert _ids(remote) == _ids(_dataset(parquet_dir, tmp_path / "beside"))
    in_place = StreamingDataset(local=str(tmp_path / "my-index"), batch_size=8)
    assert sorted(int(sample["id"]) for sample in in_place) == list(range(TOTAL))


def test_columns_with_gaps_between_them_read_shards_of_several_row_groups(parquet_dir: Path, tmp_path: Path) -> None:
    from stream_plugin.parquet import index_parquet

    index_parquet(parquet_dir, shard_bytes=1 << 20)  # 4 shards of 3 row groups; 'text' lies between the two
    dataset = _dataset(parquet_dir, tmp_path / "cache", columns=["id", "score"])
    samples = list(dataset)
    assert sorted(int(sample["id"]) for sample in samples) == list(range(TOTAL))
    assert all(sample["score"] == sample["id"] / 2 for sample in samples)


def test_the_simulator_calibrates_on_parquet_shards(parquet_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stream_plugin.cli import main

    arguments = ["simulate", str(parquet_dir), "--batch-size", "4", "--devices-per-node", "1", "--calibrate", "--json"]
    assert main(arguments) == 0
    assert json.loads(capsys.readouterr().out)["inputs"]["data"]["samples"] == TOTAL
