"""ShardLookup: the shard of each sample id equals the binary search's, whatever the shard sizes."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from stream_plugin.order.shard_lookup import ShardLookup


def _offsets(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


@pytest.mark.parametrize(
    "sizes",
    [
        np.full(1000, 997),  # even shards
        np.random.default_rng(1).integers(0, 3, 5000),  # tiny and empty shards: many per bucket
        np.random.default_rng(2).integers(1, 100_000, 300),  # large, uneven
        np.array([0, 0, 50_000, 0, 1, 0, 0, 70_000, 0]),  # empty shards first, between and last
        np.concatenate([np.full(2000, 1), [10_000_000], np.full(2000, 3)]),  # one huge shard among tiny ones
        np.full(1000, 1024),  # every shard starts a bucket (buckets of 256 ids)
        np.concatenate([np.full(3000, 700), np.zeros(5, np.int64)]),  # empty shards last
        np.concatenate([np.full(500, 600), [300, 0, 0, 400], np.full(500, 600)]),  # empty shards in one bucket
    ],
    ids=[
        "even", "tiny-and-empty", "uneven", "empty-runs", "huge-among-tiny", "bucket-aligned", "empty-last",
        "empties-inside-a-bucket",
    ],
)
def test_shards_of_equals_the_binary_search_for_every_id(sizes: np.ndarray) -> None:
    offsets = _offsets(sizes)
    ids = np.random.default_rng(0).integers(0, int(offsets[-1]), 200_000)
    ids = np.concatenate([ids, offsets[:-1][sizes > 0], offsets[1:][sizes > 0] - 1])  # every shard's first and last id
    expected = np.searchsorted(offsets, ids, side="right") - 1
    found = ShardLookup(offsets).shards_of(ids)
    np.testing.assert_array_equal(found, expected)
    assert (sizes[found] > 0).all(), "an empty shard is never chosen"


def test_a_pickled_lookup_leaves_its_table_behind() -> None:
    offsets = _offsets(np.full(100_000, 10))
    lookup = ShardLookup(offsets)
    ids = np.arange(0, int(offsets[-1]), 7)
    before = lookup.shards_of(ids)
    small = len(pickle.dumps(lookup))
    assert small < offsets.nbytes + 4096  # the offsets only, no table of 4 buckets per shard
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(lookup)).shards_of(ids), before)
