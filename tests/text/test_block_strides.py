"""Token blocks read a stride at a time: ``block_runs_many`` and ``StreamingTokenBlockDataset.get_items``
give exactly what the block-by-block reads give, and the pass reads through them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from support.token_blocks import BLOCK, STREAM_BASE, token_block_dataset, write_token_stream

from stream_plugin import Stream
from stream_plugin.format.index import load_index
from stream_plugin.format.reader import open_shard
from stream_plugin.text import StreamingTokenBlockDataset
from stream_plugin.text.blocks import block_runs, block_runs_many, num_blocks, token_offsets
from stream_plugin.text.token_counts import sample_tokens
from stream_plugin.text.token_views import TokenViews, mds_file_of


def test_block_runs_many_gives_each_blocks_runs_in_the_order_asked() -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 9, size=300)  # (samples,) with empty samples
    offsets = token_offsets(lengths)
    for block_size in (1, 3, 8, 40):
        total = num_blocks(int(offsets[-1]), block_size)
        blocks = rng.integers(0, total, size=50)  # unsorted, with repeats
        expected = [
            (row, *run)
            for row, block in enumerate(blocks.tolist())
            for run in block_runs(offsets, block_size, block)
        ]
        found = list(zip(*(part.tolist() for part in block_runs_many(offsets, block_size, blocks))))
        assert found == expected
    assert [len(part) for part in block_runs_many(offsets, 4, np.array([], np.int64))] == [0] * 5


@pytest.mark.parametrize(
    ("encoding", "compression", "token_encoding_type"),
    [
        ("ndarray:int32", None, "int64"),
        ("bytes", "zstd", "int32"),
        ("ndarray", None, "int64"),
        ("json", None, "int64"),
    ],
)
@pytest.mark.parametrize("dtype", ["stored", "int64"])
def test_get_items_gives_the_blocks_get_item_gives(
    tmp_path: Path, encoding: str, compression: str | None, token_encoding_type: str, dtype: str
) -> None:
    tokens = write_token_stream(tmp_path / "data", 200, encoding=encoding, compression=compression)
    dataset = token_block_dataset(local=str(tmp_path / "data"), token_encoding_type=token_encoding_type, dtype=dtype)
    ids = np.random.default_rng(0).integers(0, dataset.num_samples, size=70)  # many shards, repeats
    blocks: Sequence[Any] = dataset.get_items(ids)
    assert len(blocks) == len(ids)
    for block_id, block in zip(ids.tolist(), blocks):
        expected: Any = dataset.get_item(block_id)
        assert (
            isinstance(block, torch.Tensor) and block.dtype == expected.dtype and torch.equal(block, expected)
        )
        assert np.array_equal(block.numpy(), tokens[block_id * BLOCK : (block_id + 1) * BLOCK + 1])
        assert block.numpy().flags.writeable


def test_get_items_of_two_streams_keeps_the_order_asked(tmp_path: Path) -> None:
    write_token_stream(tmp_path / "a", 150)
    write_token_stream(tmp_path / "b", 60, base=STREAM_BASE, encoding="bytes")
    dataset = token_block_dataset(
        [Stream(local=str(tmp_path / "a")), Stream(local=str(tmp_path / "b"))], token_encoding_type="int32"
    )
    ids = np.random.default_rng(1).permutation(dataset.num_samples)  # (blocks,) both streams, interleaved
    blocks: Sequence[Any] = dataset.get_items(ids)
    assert any(int(block[0]) >= STREAM_BASE for block in blocks) and any(
        int(block[0]) < STREAM_BASE for block in blocks
    )
    for block_id, block in zip(ids.tolist(), blocks):
        expected: Any = dataset.get_item(block_id)
        assert torch.equal(block, expected)


def test_get_items_with_document_fields_gives_get_items_dicts(tmp_path: Path) -> None:
    write_token_stream(tmp_path / "data", 100)
    dataset = token_block_dataset(local=str(tmp_path / "data"), sequence_id=True, cu_seqlens=True)
    ids = np.array([5, 0, 9, 5])
    items: Sequence[Any] = dataset.get_items(ids)
    for block_id, item in zip(ids.tolist(), items):
        expected: Any = dataset.get_item(block_id)
        assert isinstance(item, dict) and item.keys() == expected.keys()
        assert all(torch.equal(item[key], expected[key]) for key in item)


class _Doubled(StreamingTokenBlockDataset):
    """A subclass that transforms each block in its own ``get_item``."""

    def get_item(self, sample_id: int) -> Any:
        block: Any = super().get_item(sample_id)
        return block * 2


def test_the_pass_reads_strides_through_get_items_but_a_subclasss_get_item_sees_every_block(
    tmp_path: Path,
) -> None:
    tokens = write_token_stream(tmp_path / "data", 200)
    plain = token_block_dataset(local=str(tmp_path / "data"), shuffle=False)
    assert plain._pass_reading().fetch_many is not None
    blocks = sorted(plain, key=lambda block: int(block[0]))
    assert len(blocks) == plain.num_samples
    assert all(
        np.array_equal(block.numpy(), tokens[i * BLOCK : (i + 1) * BLOCK + 1])
        for i, block in enumerate(blocks)
    )
    doubled = _Doubled(local=str(tmp_path / "data"), block_size=BLOCK, batch_size=8, shuffle=False)
    assert doubled._pass_reading().fetch_many is None
    assert all(
        torch.equal(found, block * 2)
        for found, block in zip(sorted(doubled, key=lambda b: int(b[0])), blocks)
    )


def test_a_raw_mds_shard_is_read_as_slices_of_its_file_where_samples_end_with_their_tokens(
    tmp_path: Path,
) -> None:
    for encoding, compression, kept_file in (
        ("ndarray:int32", None, True),
        ("bytes", None, True),
        ("json", None, False),
    ):
        folder = tmp_path / f"{encoding}-{compression}"
        tokens = write_token_stream(folder, 40, encoding=encoding, compression=compression)
        entry = load_index(folder / "index.json")[0]
        reader = open_shard(entry, folder)
        file, offsets = mds_file_of(reader)
        assert file is not None and offsets is not None and len(offsets) == entry.samples + 1
        for index in range(entry.samples):  # the header's offsets frame each raw sample
            assert file[offsets[index] : offsets[index + 1]].tobytes() == reader.raw_sample(index).tobytes()
        kept = TokenViews("tokens", "int32").of_shard(reader, 0, 0)
        assert (kept.file is not None) is kept_file  # a JSON list is decoded, sample by sample
        lengths = [
            len(sample_tokens(reader.read(index), "tokens", "int32")) for index in range(entry.samples)
        ]
        first = 0
        for index, length in enumerate(lengths):
            read = TokenViews("tokens", "int32").tokens(reader, 0, index, length)
            assert read.tolist() == tokens[first : first + length].tolist()
            first += length
        del file, kept, read
        reader.close()
