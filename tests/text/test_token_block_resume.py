"""Token blocks resume exactly and elastically, refuse another block_size, and download once per node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.resume import assert_resumes_identically, take_ids
from support.token_blocks import collate_with_ids, write_token_stream

from stream_plugin import Stream, StreamingDataLoader, World
from stream_plugin.errors import StateError
from stream_plugin.text import StreamingTokenBlockDataset


def loader_factory(
    local: Path,
    *,
    batch: int = 8,
    workers: int = 0,
    world: World | None = None,
    block_size: int = 16,
    remote: str | None = None,
) -> Callable[[], StreamingDataLoader]:
    def make() -> StreamingDataLoader:
        dataset = StreamingTokenBlockDataset(
            streams=[Stream(remote=remote, local=str(local))],
            block_size=block_size,
            shuffle=True,
            num_canonical_nodes=2,
            batch_size=batch,
            world=world or World(rank=0, world_size=1),
        )
        return StreamingDataLoader(
            dataset, batch_size=batch, num_workers=workers, collate_fn=collate_with_ids
        )

    return make


def test_block_loader_resumes_at_every_cut_with_workers(tmp_path: Path) -> None:
    write_token_stream(tmp_path / "data", 80)  # 59 blocks: 7 batches of 8 and one of 3
    assert_resumes_identically(
        [loader_factory(tmp_path / "data", workers=0), loader_factory(tmp_path / "data", workers=2)],
        cuts=range(0, 9),
        epochs=2,
    )


def test_block_loader_resumes_two_ranks_on_one(tmp_path: Path) -> None:
    write_token_stream(tmp_path / "data", 80)
    reference = take_ids(loader_factory(tmp_path / "data")())
    ranks = [
        loader_factory(
            tmp_path / "data",
            batch=4,
            workers=2,
            world=World(rank=r, world_size=2, local_rank=r, local_world_size=2),
        )()
        for r in range(2)
    ]
    heads = [take_ids(loader, 3) for loader in ranks]
    assert [a + b for a, b in zip(*heads)] == reference[:3]
    resumed = loader_factory(tmp_path / "data", workers=2)()
    resumed.load_state_dict(ranks[1].state_dict())
    assert take_ids(resumed) == reference[3:]


def test_block_size_change_on_resume_is_refused(tmp_path: Path) -> None:
    write_token_stream(tmp_path / "data", 80)
    first = loader_factory(tmp_path / "data", block_size=16)()
    take_ids(first, 2)
    state = first.state_dict()
    assert str(state["fingerprint"]).endswith(":block_size=16")
    other = loader_factory(tmp_path / "data", block_size=32)()
    with pytest.raises(
        StateError, match=r"block_size: expected 16 as in the checkpoint, found 32; .* Pass block_size=16"
    ):
        other.load_state_dict(state)
    other.load_state_dict(state, strict=False)  # continues at the same block count, in 32-token blocks
    assert sum(len(batch) for batch in take_ids(other)) == other.dataset.num_samples - 16


def test_block_downloads_once_per_node(tmp_path: Path) -> None:
    write_token_stream(tmp_path / "remote", 300, compression="zstd")
    remote = f"file://{tmp_path / 'remote'}"
    shards = len(list((tmp_path / "remote").glob("*.mds.zstd")))
    worlds = [World(rank=r, world_size=2, local_rank=r, local_world_size=2) for r in range(2)]
    loaders = [
        loader_factory(tmp_path / "cache", batch=4, workers=2, world=world, remote=remote)()
        for world in worlds
    ]
    for loader in loaders:  # counting the tokens downloaded every shard once; the epoch reads the cache
        take_ids(loader)
    stats = loaders[0].dataset.node_stats()
    assert shards > 3 and stats.shards_downloaded == shards
    for shard in range(shards):
        loaders[0].dataset.evict_shard(shard)
    again = loader_factory(tmp_path / "cache", remote=remote)()  # counts from the node's cache: no download
    assert again.dataset.node_stats().shards_downloaded == shards
    assert len(list((tmp_path / "cache" / ".stream_plugin" / "token-counts").glob("*.npy"))) == 1
