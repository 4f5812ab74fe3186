"""Open readers under eviction by the node's future: they close by next use, never mid-stride."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.datasets import write_ids

from stream_plugin import StreamingDataLoader, StreamingDataset
from stream_plugin.simulate.ideal_caches import belady_misses


def _node_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, nodes: int, shards_cached: int
) -> StreamingDataset:
    """Node 0 of ``nodes`` (one rank) over 96 shards of 50 samples, shuffled in blocks of 2 shards (the
    reads alternate between two shards), under ``eviction="belady"`` with room for ``shards_cached``."""
    for name, value in {
        "RANK": "0",
        "WORLD_SIZE": str(nodes),
        "LOCAL_WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
    }.items():
        monkeypatch.setenv(name, value)
    remote = write_ids(
        tmp_path / "remote", range(4_800), size_limit=50 * 1_016 + 1_024, payload=1_000
    )  # 96 shards
    shard_bytes = max(path.stat().st_size for path in remote.glob("shard.*.mds"))
    return StreamingDataset(
        remote=remote.as_uri(),
        local=str(tmp_path / "cache"),
        batch_size=16,
        shuffle=True,
        shuffle_algo="block",
        shuffle_block_size=100,
        shuffle_seed=9176,
        num_canonical_nodes=8,
        cache_limit=shards_cached * shard_bytes + 512,
        eviction="belady",
    )


@pytest.mark.parametrize("shards_cached", [12, 24])
def test_readers_closed_by_next_use_never_close_one_the_stride_still_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shards_cached: int
) -> None:
    """A small cache (few open readers), a shuffle that alternates between shards, two epochs: every
    sample arrives once per epoch. Readers closed by next use once closed a reader whose read function
    the stride still held ('operation forbidden on released memoryview')."""
    dataset = _node_dataset(
        tmp_path, monkeypatch, nodes=2, shards_cached=shards_cached
    )  # node 0 of 2: half the shards
    loader = StreamingDataLoader(dataset, batch_size=16, num_workers=0)
    for _ in range(2):
        seen = [int(i) for batch in loader for i in batch["id"]]
        assert len(seen) == len(set(seen)) == 2_400  # node 0's half, each sample once


def test_a_reader_done_before_the_next_shard_is_read_is_closed_so_eviction_can_take_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39 §3's egress case, one node of 8 with one reader: blocks of 2 shards (the reads alternate
    between two shards), a cache of 6 shards (half the node's share), 6 epochs. When the next pair
    starts, the shard just finished is the one read again farthest ahead, but this process's clock (a
    batch behind) still saw it in use: its reader stayed open (pinned) and eviction took a shard read
    sooner. Readers now rank at the opened shard's read time: 56 downloads against the optimum's 42
    became 46."""
    capacity = 6
    dataset = _node_dataset(tmp_path, monkeypatch, nodes=8, shards_cached=capacity)
    shards_read: list[int] = []
    for _ in range(6):
        shards_read += [int(sample["id"]) // 50 for sample in dataset]
    shard_bytes = max(path.stat().st_size for path in (tmp_path / "remote").glob("shard.*.mds"))
    downloads = dataset.node_stats().bytes_downloaded // shard_bytes
    optimum = belady_misses(shards_read, capacity)
    assert optimum <= downloads <= 1.15 * optimum, (downloads, optimum)


def test_two_workers_keep_the_shards_the_worker_behind_still_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39 §3's egress case with 2 DataLoader workers, node 0 of 4: a cache of 6 shards (a quarter
    of the node's share, the loader's floor), 6 epochs. The workers build adjacent batches at once; each
    ranked shards from its own clock, so the worker ahead evicted shards the worker behind still read,
    and they were fetched again: 153 downloads against the optimum's 122 (1.25x). The node's readers now
    share their times (``cache/reader_clocks.py``), and eviction ranks from the earliest: 128 to 135."""
    capacity = 6
    dataset = _node_dataset(tmp_path, monkeypatch, nodes=4, shards_cached=capacity)
    loader = StreamingDataLoader(dataset, batch_size=16, num_workers=2)
    shards_read: list[int] = []
    for _ in range(6):
        shards_read += [int(i) // 50 for batch in loader for i in batch["id"].tolist()]
    shard_bytes = max(path.stat().st_size for path in (tmp_path / "remote").glob("shard.*.mds"))
    downloads = dataset.node_stats().bytes_downloaded // shard_bytes
    optimum = belady_misses(shards_read, capacity)
    assert optimum <= downloads <= 1.15 * optimum, (downloads, optimum)
