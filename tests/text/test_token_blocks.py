"""Token blocks: the pure block maths, and StreamingTokenBlockDataset's blocks, order, mixing and errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.resume import take_ids
from support.token_blocks import BLOCK, STREAM_BASE, collate_with_ids, token_block_dataset, write_token_stream

from stream_plugin import Stream, StreamingDataLoader, World
from stream_plugin.errors import ConfigError, EmptyStreamError
from stream_plugin.text.blocks import block_pieces, blocks_per_shard, num_blocks, token_offsets


# ---------------------------------------------------------------------------------------- pure maths
def test_block_pieces_read_each_token_once_across_samples_and_empty_ones() -> None:
    lengths = np.array([3, 0, 5, 1, 0, 9, 2])  # 20 tokens
    offsets = token_offsets(lengths)
    flat = np.arange(20)
    samples = np.split(flat, offsets[1:-1])
    for block_size in (1, 2, 3, 7, 19):
        inputs = []
        for block in range(num_blocks(20, block_size)):
            pieces = block_pieces(offsets, block_size, block)
            assert all(lengths[sample] for sample, _, _ in pieces)  # empty samples never read
            tokens = np.concatenate([samples[sample][begin:end] for sample, begin, end in pieces])
            assert tokens.tolist() == list(range(block * block_size, (block + 1) * block_size + 1))
            inputs.extend(tokens[:-1].tolist())
        assert inputs == list(range(num_blocks(20, block_size) * block_size))
    assert num_blocks(20, 19) == 1 and num_blocks(20, 20) == 0


def test_blocks_per_shard_counts_the_blocks_starting_in_each_shard() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 30, size=200)
    offsets = token_offsets(lengths)
    shard_starts = np.array([0, 13, 13, 80, 150, 200])  # one empty shard
    for block_size in (1, 5, 64, 1000):
        total = num_blocks(int(offsets[-1]), block_size)
        starts = np.arange(total) * block_size  # first token of each block
        sample_of_start = np.searchsorted(offsets, starts, side="right") - 1
        shard_of_start = np.searchsorted(shard_starts, sample_of_start, side="right") - 1
        expected = np.bincount(shard_of_start, minlength=len(shard_starts) - 1)
        assert blocks_per_shard(offsets, shard_starts, block_size).tolist() == expected.tolist()


# ---------------------------------------------------------------------------------------- the dataset
@pytest.mark.parametrize(
    ("encoding", "compression", "token_encoding_type"),
    [
        ("ndarray:int32", None, "int64"),
        ("bytes", "zstd", "int32"),
        ("ndarray", None, "int64"),
        ("json", None, "int64"),
    ],
)
def test_blocks_cover_the_token_stream_exactly_once_per_epoch(
    tmp_path: Path, encoding: str, compression: str | None, token_encoding_type: str
) -> None:
    tokens = write_token_stream(tmp_path / "data", 300, encoding=encoding, compression=compression)
    dataset = token_block_dataset(local=str(tmp_path / "data"), token_encoding_type=token_encoding_type)
    assert dataset.num_tokens == len(tokens)
    assert dataset.num_samples == (len(tokens) - 1) // BLOCK == len(dataset)
    for _ in range(2):  # every epoch, in a new order
        blocks = sorted(list(dataset), key=lambda block: int(block[0]))
        assert all(block.dtype.is_floating_point is False and block.shape == (BLOCK + 1,) for block in blocks)
        inputs = np.concatenate([block[:-1].numpy() for block in blocks])
        assert np.array_equal(inputs, tokens[: len(inputs)])  # every token an input exactly once
        assert all(
            np.array_equal(block[1:].numpy(), tokens[int(block[0]) + 1 : int(block[0]) + BLOCK + 1])
            for block in blocks
        )
    assert np.array_equal(dataset[3].numpy(), tokens[3 * BLOCK : 4 * BLOCK + 1])


def test_block_order_is_shuffled_and_changes_every_epoch(tmp_path: Path) -> None:
    write_token_stream(tmp_path / "data", 300)
    loader = StreamingDataLoader(
        token_block_dataset(local=str(tmp_path / "data")), batch_size=8, collate_fn=collate_with_ids
    )
    first, second = take_ids(loader), take_ids(loader)
    assert sorted(sum(first, [])) == sorted(sum(second, []))
    assert first != second and sum(first, []) != sorted(sum(first, []))


def _rank_loader(data: Path, ranks: int, rank: int, workers: int) -> StreamingDataLoader:
    world = World(rank=rank, world_size=ranks, local_rank=rank, local_world_size=ranks)
    dataset = token_block_dataset(local=str(data), batch_size=8 // ranks, world=world)
    return StreamingDataLoader(
        dataset, batch_size=8 // ranks, num_workers=workers, collate_fn=collate_with_ids, drop_last=True
    )


@pytest.mark.parametrize(("ranks", "workers"), [(1, 2), (2, 0), (2, 2), (4, 0), (4, 2)])
def test_block_order_is_the_same_on_1_2_4_ranks_and_0_2_workers(
    tmp_path: Path, ranks: int, workers: int
) -> None:
    write_token_stream(tmp_path / "data", 120)  # 89 blocks: 11 whole global batches of 8
    reference = take_ids(_rank_loader(tmp_path / "data", 1, 0, 0))
    assert len(reference) == 11
    per_rank = [take_ids(_rank_loader(tmp_path / "data", ranks, rank, workers)) for rank in range(ranks)]
    assert [sum(parts, []) for parts in zip(*per_rank)] == reference


def test_two_streams_mixed_by_token_share(tmp_path: Path) -> None:
    write_token_stream(tmp_path / "a", 400)  # ~4,700 tokens
    write_token_stream(tmp_path / "b", 100, base=STREAM_BASE)  # ~1,100 tokens
    natural = token_block_dataset([Stream(local=str(tmp_path / "a")), Stream(local=str(tmp_path / "b"))])
    per_stream = natural.samples_per_stream.tolist()
    assert per_stream == [(tokens - 1) // BLOCK for tokens in natural.tokens_per_stream]  # share of tokens
    streams = [
        Stream(local=str(tmp_path / "a"), proportion=0.25),
        Stream(local=str(tmp_path / "b"), proportion=0.75),
    ]
    mixed = token_block_dataset(streams, epoch_size=400)
    ids: list[int] = sum(take_ids(StreamingDataLoader(mixed, batch_size=8, collate_fn=collate_with_ids)), [])
    from_b = sum(1 for token in ids if token >= STREAM_BASE)
    assert (len(ids) - from_b, from_b) == (100, 300)  # 25% / 75% of the epoch's blocks, so of its tokens
    assert len(set(t for t in ids if t >= STREAM_BASE)) == per_stream[1]  # b's blocks all used, some twice
    assert [stream.choose for stream in streams] == [100, 300]


def test_block_dataset_refuses_bad_arguments(tmp_path: Path) -> None:
    write_token_stream(tmp_path / "data", 5)  # 1 + 8 + 15 + 22 + 6 = 52 tokens
    local = str(tmp_path / "data")
    with pytest.raises(ConfigError, match="block_size"):
        token_block_dataset(local=local, block_size=0)
    with pytest.raises(
        ConfigError,
        match=r"column: expected a token column 'ids' in every sample, found columns \['tokens'\]",
    ):
        token_block_dataset(local=local, column="ids")
    with pytest.raises(EmptyStreamError, match=r"at least block_size \+ 1 = 53 tokens, found 52"):
        token_block_dataset(local=local, block_size=52)
    assert token_block_dataset(local=local, block_size=51).num_samples == 1
