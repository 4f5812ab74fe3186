"""Issue 11's §1 and §2 scenarios, written once, run against ours and (where importable) MosaicML: 0.12.0
in CI (the Composer environment), 0.13.0 in the peers environment.

A scenario marked with ``differs`` is expected to fail on one implementation: the documentation's
"Differences from MosaicML Streaming" page (docs/mosaicml-differences.md) lists each MosaicML one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from implementations import Implementation, differs
from torch.utils.data import DataLoader

# ---------------------------------------------------------------------------------------------- helpers


def _ids(loader: Any) -> list[list[int]]:
    return [[int(i) for i in batch["id"]] for batch in loader]


def _flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


def _dataset(impl: Implementation, remote: Path, tmp_path: Path, **kwargs: Any) -> Any:
    return impl.StreamingDataset(remote=str(remote), local=str(tmp_path / "cache"), **kwargs)


def _two_streams(impl: Implementation, folders: list[Path], tmp_path: Path, **kwargs: Any) -> Any:
    streams = [impl.Stream(remote=str(folder), local=str(tmp_path / folder.name)) for folder in folders]
    return impl.StreamingDataset(streams=streams, **kwargs)


# ------------------------------------------------------------------------ §1 exact counts, one device


def test_one_device_yields_each_sample_exactly_once(
    impl: Implementation, ids_117: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    dataset = _dataset(impl, ids_117, tmp_path, batch_size=4)
    loader = impl.StreamingDataLoader(dataset, batch_size=4)
    batches = _ids(loader)
    assert sorted(_flat(batches)) == list(range(117))
    assert [len(batch) for batch in batches] == [4] * 29 + [1]
    assert (len(dataset), len(loader)) == (117, 30)


def test_drop_last_drops_the_last_partial_batch(
    impl: Implementation, ids_117: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    dataset = _dataset(impl, ids_117, tmp_path, batch_size=4)
    loader = impl.StreamingDataLoader(dataset, batch_size=4, drop_last=True)
    batches = _ids(loader)
    assert [len(batch) for batch in batches] == [4] * 29
    assert len(set(_flat(batches))) == 116
    assert len(loader) == 29


def test_len_of_the_loader_matches_the_batches_workers_yield(
    impl: Implementation, ids_117: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    dataset = _dataset(impl, ids_117, tmp_path, batch_size=4)
    loader = impl.StreamingDataLoader(dataset, batch_size=4, num_workers=2)
    batches = _ids(loader)
    assert len(batches) == len(loader)
    assert sorted(_flat(batches)) == list(range(117))


def test_ranks_share_the_last_partial_batch_without_repeats(
    impl: Implementation, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if not impl.is_ours:
        pytest.skip("MosaicML needs a real multi-process job for several ranks (tests/dataset runs ours so)")
    from support.datasets import write_ids

    from stream_plugin import World

    write_ids(tmp_path / "ids3000", range(3000), size_limit=1 << 14)
    yielded: list[int] = []
    for rank in range(4):
        world = World(rank=rank, world_size=4, local_rank=rank, local_world_size=4)
        dataset = impl.StreamingDataset(local=str(tmp_path / "ids3000"), batch_size=16, world=world)
        yielded += _flat(_ids(impl.StreamingDataLoader(dataset, batch_size=16)))
    assert sorted(yielded) == list(range(3000))  # 3000 divides by 4 ranks: no repeat is needed


# ---------------------------------------------------------------------------- §2 order and batching


@pytest.mark.parametrize("batching_method", ["random", "stratified", "per_stream", "device_per_stream"])
def test_shuffle_false_gives_the_same_order_every_epoch(
    impl: Implementation,
    two_streams: list[Path],
    tmp_path: Path,
    batching_method: str,
    request: pytest.FixtureRequest,
) -> None:
    dataset = _two_streams(impl, two_streams, tmp_path, batch_size=10, batching_method=batching_method)
    loader = impl.StreamingDataLoader(dataset, batch_size=10)
    assert _ids(loader) == _ids(loader)


def test_stratified_batches_hold_a_fixed_count_per_stream(
    impl: Implementation, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from support.datasets import write_streams

    folders = write_streams(tmp_path / "data", [100, 300])  # shares 1.5 and 4.5 of a batch of 6
    dataset = _two_streams(impl, folders, tmp_path, batch_size=6, batching_method="stratified", shuffle=True)
    loader = impl.StreamingDataLoader(dataset, batch_size=6)
    per_batch = {sum(1 for i in batch if i < 100) for batch in _ids(loader) if len(batch) == 6}
    assert len(per_batch) == 1


def test_stratified_refuses_a_stream_too_small_for_its_share(
    impl: Implementation, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from support.datasets import write_streams

    folders = write_streams(tmp_path / "data", [5, 500])  # stream 0's share of a batch of 8 is 0.08
    dataset = _two_streams(impl, folders, tmp_path, batch_size=8, batching_method="stratified")
    with pytest.raises(ValueError, match="stream 0"):
        list(impl.StreamingDataLoader(dataset, batch_size=8))


def test_per_stream_yields_mosaicmls_number_of_batches(
    impl: Implementation, two_streams: list[Path], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    dataset = _two_streams(impl, two_streams, tmp_path, batch_size=16, batching_method="per_stream")
    batches = _ids(impl.StreamingDataLoader(dataset, batch_size=16))
    assert len(batches) == 100 // 16 + 200 // 16  # each stream's partial batch is dropped
    assert all(len({i < 100 for i in batch}) == 1 for batch in batches)


# ----------------------------------------------------------------------------------- §2 validation


def test_dataloader_workers_without_batch_size_raise_value_error(
    impl: Implementation, ids_117: Path, tmp_path: Path
) -> None:
    dataset = _dataset(impl, ids_117, tmp_path)
    with pytest.raises(ValueError, match="batch_size"):
        next(iter(DataLoader(dataset, batch_size=4, num_workers=1)))


def test_more_canonical_nodes_than_samples_raise_value_error(
    impl: Implementation, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    differs(request, impl, mosaicml="MosaicML 0.13 only warns, then repeats samples to fill the nodes")
    from support.datasets import write_ids

    write_ids(tmp_path / "tiny", range(3))
    dataset = impl.StreamingDataset(local=str(tmp_path / "tiny"), num_canonical_nodes=4, batch_size=1)
    with pytest.raises(ValueError, match="num_canonical_nodes"):
        list(dataset)


def test_the_same_local_with_another_remote_raises_value_error(
    impl: Implementation, ids_117: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    shutil.copytree(ids_117, other)
    first = _dataset(impl, ids_117, tmp_path)
    with pytest.raises(ValueError):
        _dataset(impl, other, tmp_path)
    del first


def test_unsafe_columns_raise_value_error_when_the_dataset_is_built(
    impl: Implementation, tmp_path: Path
) -> None:
    with impl.MDSWriter(out=str(tmp_path / "pickled"), columns={"obj": "pkl"}) as writer:
        writer.write({"obj": {"a": 1}})
    with pytest.raises(ValueError, match="allow_unsafe_types"):
        impl.StreamingDataset(local=str(tmp_path / "pickled"), batch_size=1)


def test_an_index_with_no_shards_raises_runtime_error(impl: Implementation, tmp_path: Path) -> None:
    with impl.MDSWriter(out=str(tmp_path / "empty"), columns={"id": "int"}):
        pass
    with pytest.raises(RuntimeError):
        impl.StreamingDataset(local=str(tmp_path / "empty"), batch_size=1)


def test_compress_of_text_raises_type_error(impl: Implementation) -> None:
    with pytest.raises(TypeError):
        impl.compress("zstd", "text")


def test_partition_algo_orig_is_accepted_with_a_warning(
    impl: Implementation, ids_117: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    differs(request, impl, mosaicml="MosaicML 0.13 implements 'orig' (ours has one partitioning)")
    with pytest.warns(UserWarning, match="partition_algo"):
        _dataset(impl, ids_117, tmp_path, partition_algo="orig")


# ---------------------------------------------------------------------------------------- §2 names


def test_num_shards_and_size(impl: Implementation, ids_117: Path, tmp_path: Path) -> None:
    dataset = _dataset(impl, ids_117, tmp_path)
    assert dataset.num_shards == len(dataset.shards) > 1
    assert dataset.size == 117


def test_size_can_also_be_called(
    impl: Implementation, ids_117: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    differs(request, impl, mosaicml="MosaicML 0.13's size is a property; its FAQ's size() fails")
    assert _dataset(impl, ids_117, tmp_path).size() == 117


def test_next_epoch_reads_and_sets_the_next_pass(impl: Implementation, ids_117: Path, tmp_path: Path) -> None:
    dataset = _dataset(impl, ids_117, tmp_path, batch_size=4, shuffle=True)
    loader = impl.StreamingDataLoader(dataset, batch_size=4)
    assert dataset.next_epoch == 0
    first = _ids(loader)
    assert dataset.next_epoch == 1
    dataset.next_epoch = 0
    assert _ids(loader) == first


def test_cache_usage_and_evict_shard(impl: Implementation, ids_117: Path, tmp_path: Path) -> None:
    dataset = _dataset(impl, ids_117, tmp_path, batch_size=4)
    index_bytes = (tmp_path / "cache" / "index.json").stat().st_size
    dataset.prepare_shard(0)
    assert dataset.cache_usage > index_bytes
    dataset.evict_shard(0)
    assert dataset.cache_usage == index_bytes


def test_evict_coldest_shard_evicts_the_least_recently_used(
    impl: Implementation, ids_117: Path, tmp_path: Path
) -> None:
    dataset = _dataset(impl, ids_117, tmp_path, batch_size=4)
    for shard_id in (1, 0):
        dataset.prepare_shard(shard_id)
    before = {path.name for path in (tmp_path / "cache").glob("shard.*")}
    dataset.evict_coldest_shard()
    after = {path.name for path in (tmp_path / "cache").glob("shard.*")}
    assert before - after == {"shard.00001.mds"}


def test_a_stream_subclass_registered_by_name_builds_the_datasets_stream(
    impl: Implementation, ids_117: Path, tmp_path: Path
) -> None:
    class Tagged(impl.Stream):  # type: ignore[name-defined,misc]
        def __init__(self, *, tag: str = "", **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.tag = tag

    name = f"tagged_{uuid.uuid4().hex[:8]}"
    impl.streams_registry.register(name, func=Tagged)
    dataset = _dataset(impl, ids_117, tmp_path, stream_name=name, stream_config={"tag": "web"})
    (stream,) = dataset.streams
    assert isinstance(stream, Tagged) and stream.tag == "web"


def test_local_dataset_reads_by_index(impl: Implementation, ids_117: Path) -> None:
    dataset = impl.LocalDataset(str(ids_117))
    assert len(dataset) == 117
    assert [dataset[i]["id"] for i in (0, 116)] == [0, 116]


def test_stream_weights_are_resolved_after_the_dataset_is_built(
    impl: Implementation, two_streams: list[Path], tmp_path: Path
) -> None:
    a = impl.Stream(remote=str(two_streams[0]), local=str(tmp_path / "a"), proportion=0.25)
    b = impl.Stream(remote=str(two_streams[1]), local=str(tmp_path / "b"), proportion=0.75)
    impl.StreamingDataset(streams=[a, b], batch_size=4)
    assert (int(a.choose), int(b.choose)) == (75, 225)
    assert (float(a.repeat), float(b.repeat)) == (0.75, 1.125)
    assert float(a.proportion) == 0.25


def test_stream_split_keeps_local_as_given(impl: Implementation) -> None:
    stream = impl.Stream(remote="s3://bucket/data", local="/cache/data", split="train")
    assert (stream.local, stream.split) == ("/cache/data", "train")


def test_a_stream_without_local_caches_in_a_temp_folder_named_from_the_remote(impl: Implementation) -> None:
    remote = f"s3://bucket/{uuid.uuid4().hex}"
    digest = hashlib.blake2s(remote.encode(), digest_size=16).hexdigest()
    stream = impl.Stream(remote=remote, split="val")
    try:
        assert stream.local == os.path.join(tempfile.gettempdir(), digest, "val")
    finally:
        shutil.rmtree(os.path.join(tempfile.gettempdir(), digest), ignore_errors=True)


@pytest.mark.parametrize(
    ("text", "expected"), [("35.78kb", int(35.78 * 1024)), ("64mb", 64 << 20), ("1gb", 1 << 30)]
)
def test_byte_strings_with_floats(impl: Implementation, text: str, expected: int) -> None:
    assert impl.parse_bytes(text) == expected


def test_byte_strings_in_iec_units(impl: Implementation, request: pytest.FixtureRequest) -> None:
    differs(request, impl, mosaicml="MosaicML 0.13 reads kb/mb/gb only ('64MiB' is an error)")
    assert impl.parse_bytes("64MiB") == 64 << 20


@pytest.mark.parametrize(("text", "expected"), [("100k", 100_000), ("1.5m", 1_500_000), ("2b", 2 * 10**9)])
def test_count_strings_with_floats(impl: Implementation, text: str, expected: int) -> None:
    assert impl.parse_count(text) == expected


def test_jpeg_array_takes_a_list_of_jpeg_bytes(impl: Implementation, tmp_path: Path) -> None:
    from PIL import Image

    images = []
    for width in (3, 5):
        path = tmp_path / f"{width}.jpg"
        Image.new("RGB", (width, 2), (9, 9, 9)).save(path)
        images.append(path.read_bytes())
    with impl.MDSWriter(out=str(tmp_path / "jpegs"), columns={"images": "jpeg_array"}) as writer:
        writer.write({"images": images})
    dataset = impl.LocalDataset(str(tmp_path / "jpegs"))
    assert len(dataset) == 1
    decoded = dataset[0]["images"]
    assert [image.size for image in decoded] == [(3, 2), (5, 2)]


# ---------------------------------------------------------------------------------- multiset sanity


def test_an_epoch_covers_two_streams_as_weighted(
    impl: Implementation, two_streams: list[Path], tmp_path: Path
) -> None:
    a = impl.Stream(remote=str(two_streams[0]), local=str(tmp_path / "a"), repeat=2)
    b = impl.Stream(remote=str(two_streams[1]), local=str(tmp_path / "b"))
    dataset = impl.StreamingDataset(streams=[a, b], batch_size=50)
    counts = Counter(_flat(_ids(impl.StreamingDataLoader(dataset, batch_size=50))))
    assert {counts[i] for i in range(100)} == {2} and {counts[i] for i in range(100, 300)} == {1}
