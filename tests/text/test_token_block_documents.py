"""Document boundaries in token blocks: sequence_id, position_ids and cu_seqlens, per block and per batch,
against a slow reference written out token by token, with samples, EOS or BOS tokens as documents, across
shard boundaries, with workers, and after a resume in the middle of an epoch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from support.resume import assert_resumes_identically

from stream_plugin import MDSWriter, StreamingDataLoader, World
from stream_plugin.errors import ConfigError
from stream_plugin.text import StreamingTokenBlockDataset, collate_token_blocks

BLOCK = 16
SPLIT = 0  # the EOS token, or the BOS token
MODES = ("samples", "eos", "bos")


def write_documents(folder: Path, num_samples: int = 90) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Samples of 1 to 23 tokens in shards of a few samples. Token ``p`` of the flat stream is ``p + 1``,
    except every 5th to 13th token, a split token (0), so EOS / BOS documents end elsewhere than samples.

    Returns the flat tokens and, per mode, each token's document in the stream."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 24, num_samples)
    total = int(lengths.sum())
    tokens = np.arange(1, total + 1, dtype=np.int32)
    eos_at = np.cumsum(rng.integers(5, 14, total))
    tokens[eos_at[eos_at < total]] = SPLIT
    documents = {
        "samples": np.repeat(np.arange(num_samples), lengths),
        "eos": np.concatenate([[0], np.cumsum(tokens[:-1] == SPLIT)]),  # an EOS ends its document
        "bos": np.cumsum(tokens == SPLIT),  # a BOS starts the next one
    }
    with MDSWriter(out=str(folder), columns={"tokens": "ndarray:int32"}, size_limit=1 << 8) as writer:
        for row in np.split(tokens, np.cumsum(lengths)[:-1]):
            writer.write({"tokens": row})
    return tokens.astype(np.int64), documents


def reference_block(tokens: np.ndarray, documents: np.ndarray, block: int) -> dict[str, list[int]]:
    """Block ``block``'s fields, written out one token at a time: what the dataset must give."""
    start = block * BLOCK
    sequence_id, position_ids, cu_seqlens = [0], [0], [0]
    for t in range(1, BLOCK + 1):
        new_document = documents[start + t] != documents[start + t - 1]
        sequence_id.append(sequence_id[-1] + 1 if new_document else sequence_id[-1])
        position_ids.append(0 if new_document else position_ids[-1] + 1)
        if new_document and t < BLOCK:  # the last token is a label only: no input document starts there
            cu_seqlens.append(t)
    cu_seqlens.append(BLOCK)
    return {
        "input_ids": tokens[start : start + BLOCK + 1].tolist(),
        "sequence_id": sequence_id,
        "position_ids": position_ids,
        "cu_seqlens": cu_seqlens,
    }


def block_of(input_ids: torch.Tensor) -> int:
    """The block a row holds: its first token that is not a split token names its own stream position."""
    t = int(torch.nonzero(input_ids != SPLIT)[0])
    return (int(input_ids[t]) - 1 - t) // BLOCK


def split_token(mode: str) -> dict[str, int]:
    return {"eos": {"eos_token_id": SPLIT}, "bos": {"bos_token_id": SPLIT}}.get(mode, {})


def make_dataset(data: Path, **kwargs: Any) -> StreamingTokenBlockDataset:
    arguments: dict[str, Any] = {
        "local": str(data),
        "block_size": BLOCK,
        "batch_size": 4,
        "shuffle": True,
        "num_canonical_nodes": 2,
        "world": World(rank=0, world_size=1),
        "sequence_id": True,
        "position_ids": True,
        "cu_seqlens": True,
    }
    arguments.update(kwargs)
    return StreamingTokenBlockDataset(**arguments)


@pytest.mark.parametrize("mode", MODES)
def test_document_fields_of_every_block_match_the_reference(tmp_path: Path, mode: str) -> None:
    tokens, documents_of = write_documents(tmp_path / "data")
    documents, sample_of_token = documents_of[mode], documents_of["samples"]
    dataset = make_dataset(tmp_path / "data", dtype="stored", **split_token(mode))
    first_sample_per_shard = dataset.plan.shards.sample_offset_per_shard
    spans_three_across_shards = 0
    for block in range(len(dataset)):
        item = dataset[block]
        assert item["input_ids"].dtype == torch.int32 and item["cu_seqlens"].dtype == torch.int32
        assert {key: value.tolist() for key, value in item.items()} == reference_block(
            tokens, documents, block
        )
        window = slice(block * BLOCK, (block + 1) * BLOCK + 1)
        shards = np.searchsorted(first_sample_per_shard, sample_of_token[window], side="right")
        spans_three_across_shards += len(set(documents[window])) >= 3 and len(set(shards)) > 1
    assert spans_three_across_shards > 10  # the case the fields exist for is well covered


def _check_batch(tokens: np.ndarray, documents: np.ndarray) -> Callable[[dict[str, Any]], list[int]]:
    """A ``read`` for ``assert_resumes_identically``: checks the batch against the reference, returns its
    blocks."""

    def read(batch: dict[str, Any]) -> list[int]:
        blocks = [block_of(row) for row in batch["input_ids"]]
        expected = [reference_block(tokens, documents, block) for block in blocks]
        for key in ("input_ids", "sequence_id", "position_ids"):
            assert batch[key].tolist() == [fields[key] for fields in expected]
        packed = [0]  # every row's documents, one after the other in the flattened inputs
        for row, fields in enumerate(expected):
            packed.extend(row * BLOCK + end for end in fields["cu_seqlens"][1:])
        assert batch["cu_seqlens"].dtype == torch.int32 and batch["cu_seqlens"].tolist() == packed
        assert batch["max_seqlen"] == max(np.diff(packed))
        return blocks

    return read


@pytest.mark.parametrize("mode", MODES)
def test_document_fields_resume_mid_epoch_with_workers(tmp_path: Path, mode: str) -> None:
    tokens, documents_of = write_documents(tmp_path / "data")
    documents = documents_of[mode]

    def maker(workers: int) -> Callable[[], StreamingDataLoader]:
        def make() -> StreamingDataLoader:
            dataset = make_dataset(tmp_path / "data", **split_token(mode))
            return StreamingDataLoader(
                dataset, batch_size=4, num_workers=workers, collate_fn=collate_token_blocks
            )

        return make

    # A new dataset and loader continue from states saved mid-epoch (blocks cut documents anywhere).
    assert_resumes_identically(
        [maker(0), maker(2)], cuts=[1, 7, 20], epochs=2, read=_check_batch(tokens, documents)
    )


def test_default_item_stays_one_tensor_and_dtype_is_kept_or_widened(tmp_path: Path) -> None:
    tokens, _ = write_documents(tmp_path / "data")
    plain = make_dataset(tmp_path / "data", sequence_id=False, position_ids=False, cu_seqlens=False)
    stored = make_dataset(
        tmp_path / "data", sequence_id=False, position_ids=False, cu_seqlens=False, dtype="stored"
    )
    assert plain[5].dtype == torch.int64 and stored[5].dtype == torch.int32
    assert plain[5].tolist() == stored[5].tolist() == tokens[5 * BLOCK : 6 * BLOCK + 1].tolist()
    stored[5][0] = -1  # a block is its own copy: writing it changes neither the shard nor the next read
    assert stored[5].tolist() == tokens[5 * BLOCK : 6 * BLOCK + 1].tolist()
    only = make_dataset(tmp_path / "data", position_ids=False, cu_seqlens=False)[5]
    assert sorted(only) == ["input_ids", "sequence_id"]
    batch = collate_token_blocks([plain[0], plain[1]])
    assert isinstance(batch, torch.Tensor) and batch.shape == (2, BLOCK + 1)


def test_document_options_refuse_bad_values(tmp_path: Path) -> None:
    write_documents(tmp_path / "data")
    with pytest.raises(ConfigError, match=r"dtype: expected one of \['int64', 'stored'\].*found 'int32'"):
        make_dataset(tmp_path / "data", dtype="int32")
    with pytest.raises(
        ConfigError, match=r"eos_token_id: expected a token id \(an int >= 0\) or None, found -1"
    ):
        make_dataset(tmp_path / "data", eos_token_id=-1)
    with pytest.raises(
        ConfigError, match=r"eos_token_id: expected it with a document field .* found eos_token_id=0 alone"
    ):
        make_dataset(
            tmp_path / "data", sequence_id=False, position_ids=False, cu_seqlens=False, eos_token_id=SPLIT
        )
    with pytest.raises(
        ConfigError, match=r"eos_token_id / bos_token_id: expected one token .* found both \(0 and 1\)"
    ):
        make_dataset(tmp_path / "data", eos_token_id=0, bos_token_id=1)
    with pytest.raises(ConfigError, match=r"collate_token_blocks: expected StreamingTokenBlockDataset items"):
        collate_token_blocks([{"tokens": torch.zeros(3)}])
