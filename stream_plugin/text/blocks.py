"""Token blocks: one stream's samples read as one flat token stream, cut into fixed-size blocks.

Pure numpy, no I/O. A stream whose samples hold ``tokens_per_sample`` tokens is the concatenation of
those samples in stored order. Block ``b`` (of ``block_size``) covers tokens ``[b*block_size,
(b+1)*block_size + 1)``: ``block_size`` inputs plus the next token, so labels are the inputs shifted by
one and every token of the stream is an input exactly once (the last token of a block is the first of
the next). A stream of ``T`` tokens has ``(T - 1) // block_size`` blocks; the few tokens after the last
whole block are not read.

A block belongs to the shard that holds its first token, so the sample order's shard maths (shard
shuffles, canonical-node spans) applies to blocks unchanged; a block that runs past its shard's end
also reads the next shard(s).
"""

from __future__ import annotations

import numpy as np


def token_offsets(tokens_per_sample: np.ndarray) -> np.ndarray:
    """The first token of each sample in the flat stream, plus the total: ``(num_samples + 1,)`` int64."""
    counts = np.asarray(tokens_per_sample, np.int64)  # (num_samples,)
    offsets = np.zeros(len(counts) + 1, np.int64)  # (num_samples + 1,)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def num_blocks(num_tokens: int, block_size: int) -> int:
    """Whole blocks of ``block_size`` inputs (+1 label token) in ``num_tokens`` tokens."""
    return max(0, (int(num_tokens) - 1) // block_size)


def blocks_per_shard(offsets: np.ndarray, sample_offset_per_shard: np.ndarray, block_size: int) -> np.ndarray:
    """How many blocks start in each shard of one stream: ``(num_shards,)`` int64.

    ``offsets`` is the stream's ``token_offsets``; ``sample_offset_per_shard`` the first stream-local
    sample of each shard plus the stream's sample count, ``(num_shards + 1,)``.
    """
    total = num_blocks(int(offsets[-1]), block_size)
    shard_tokens = offsets[np.asarray(sample_offset_per_shard, np.int64)]  # (num_shards + 1,): first token
    first_block = -(-shard_tokens // block_size)  # (num_shards + 1,): first block starting at or after it
    first_block = np.minimum(first_block, total)
    return np.diff(first_block).astype(np.int64)  # (num_shards,)


def block_pieces(offsets: np.ndarray, block_size: int, block: int) -> list[tuple[int, int, int]]:
    """``(sample, begin, end)`` per sample that block ``block`` reads: tokens ``[begin, end)`` of that
    stream-local sample, in order. Empty samples are skipped."""
    return [(sample, begin, end) for sample, begin, end, _ in block_runs(offsets, block_size, block)]


def block_runs(offsets: np.ndarray, block_size: int, block: int) -> list[tuple[int, int, int, int]]:
    """``block_pieces`` with each sample's token count: ``(sample, begin, end, count)`` (the read path)."""
    start = block * block_size
    stop = start + block_size + 1
    sample = int(offsets.searchsorted(start, side="right")) - 1
    sample_start = offsets.item(sample)  # .item: a Python int, without a numpy scalar on the way
    runs = []
    while sample_start < stop:  # stop <= offsets[-1]: the loop ends inside the stream
        sample_end = offsets.item(sample + 1)
        begin = start - sample_start if start > sample_start else 0
        end = (stop if stop < sample_end else sample_end) - sample_start
        if end > begin:
            runs.append((sample, begin, end, sample_end - sample_start))
        sample, sample_start = sample + 1, sample_end
    return runs


def block_runs_many(
    offsets: np.ndarray, block_size: int, blocks: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``block_runs`` of many blocks at once, as arrays with one entry per run, in the order of
    ``blocks`` and then of the stream: ``(row, sample, begin, end, count)``, where ``row`` is the run's
    position in ``blocks``. Empty samples are skipped."""
    blocks = np.asarray(blocks, np.int64)  # (n,) stream-local block ids
    starts = blocks * block_size  # (n,) first token of each block
    stops = starts + block_size + 1  # (n,) one past its last token
    first = offsets.searchsorted(starts, side="right") - 1  # (n,) the sample holding the first token
    last = offsets.searchsorted(stops - 1, side="right") - 1  # (n,) the sample holding the last token
    spans = last - first + 1  # (n,) samples each block touches, empty ones included
    rows = np.repeat(np.arange(len(blocks)), spans)  # (runs,)
    run_starts = np.cumsum(spans) - spans  # (n,) each block's first run
    samples = np.arange(len(rows)) + np.repeat(first - run_starts, spans)  # (runs,) first, first + 1, ..
    sample_start, sample_end = offsets[samples], offsets[samples + 1]  # (runs,) each
    begin = np.maximum(starts[rows] - sample_start, 0)  # (runs,) within the sample
    end = np.minimum(stops[rows], sample_end) - sample_start  # (runs,)
    keep = end > begin  # (runs,) False for empty samples
    count = sample_end - sample_start
    return rows[keep], samples[keep], begin[keep], end[keep], count[keep]
