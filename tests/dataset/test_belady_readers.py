"""Open readers under eviction by the node's future: they close by next use, never mid-stride."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.datasets import write_ids

from stream_plugin import StreamingDataLoader, StreamingDataset


@pytest.mark.parametrize("shards_cached", [12, 24])
def test_readers_closed_by_next_use_never_close_one_the_stride_still_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shards_cached: int
) -> None:
    """A small cache (few open readers), a shuffle that alternates between shards, two epochs: every
    sample arrives once per epoch. Readers closed by next use once closed a reader whose read function
    the stride still held ('operation forbidden on released memoryview')."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)  # node 0 of 2: it reads half of the shards
    remote = write_ids(tmp_path / "remote", range(4_800), size_limit=50 * 1_016 + 1_024, payload=1_000)  # 96 shards
    shard_bytes = max(path.stat().st_size for path in remote.glob("shard.*.mds"))
    dataset = StreamingDataset(
        remote=remote.as_uri(),
        local=str(tmp_path / "cache"),
        batch_size=16,
        shuffle=True,
        shuffle_algo="block",
        shuffle_block_size=100,
        num_canonical_nodes=8,
        cache_limit=shards_cached * shard_bytes + 512,
        eviction="belady",
    )
    loader = StreamingDataLoader(dataset, batch_size=16, num_workers=0)
    for _ in range(2):
        seen = [int(i) for batch in loader for i in batch["id"]]
        assert len(seen) == len(set(seen)) == 2_400  # node 0's half, each sample once
