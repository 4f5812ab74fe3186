"""The shard plan: runs of whole row groups of one file, packed up to the target size (pure)."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.parquet.plan import plan_shards


def test_small_row_groups_are_packed_up_to_the_target() -> None:
    assert plan_shards([[10, 10, 10, 10, 10]], 25) == [(0, 0, 2), (0, 2, 4), (0, 4, 5)]


def test_a_row_group_larger_than_the_target_is_a_shard_of_its_own() -> None:
    assert plan_shards([[5, 100, 5]], 20) == [(0, 0, 1), (0, 1, 2), (0, 2, 3)]


def test_a_file_with_one_huge_row_group_is_one_shard() -> None:
    assert plan_shards([[10**9]], 64) == [(0, 0, 1)]


def test_a_shard_never_spans_two_files_and_empty_files_have_none() -> None:
    assert plan_shards([[1, 1], [], [1]], 100) == [(0, 0, 2), (2, 0, 1)]


@pytest.mark.parametrize("seed", range(20))
def test_every_row_group_is_in_exactly_one_shard_within_the_target(seed: int) -> None:
    rng = np.random.default_rng(seed)
    files = [rng.integers(1, 50, rng.integers(0, 8)).tolist() for _ in range(rng.integers(1, 6))]
    target = int(rng.integers(1, 120))
    shards = plan_shards(files, target)
    covered = [(file, group) for file, first, stop in shards for group in range(first, stop)]
    assert covered == [(file, group) for file, sizes in enumerate(files) for group in range(len(sizes))]
    for file, first, stop in shards:
        assert stop - first == 1 or sum(files[file][first:stop]) <= target
