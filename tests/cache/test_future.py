"""NodeFuture: when the node reads each shard next, from the shard-level spans of its read order."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.cache import CacheConfig
from stream_plugin.cache.future import EVICTION_POLICIES, NEVER, NodeFuture, check_eviction
from stream_plugin.errors import ConfigError


def _future() -> NodeFuture:
    # Pass 0 reads shard 0 at times 0..3 and shard 1 at 2..9; pass 1 reads shard 1 at 20 and shard 2 at 25.
    first_pass = [(np.array([0, 1, 2, 3]), np.array([0, 0, 1, 0])), (np.array([9]), np.array([1]))]
    second_pass = [(np.array([20, 25]), np.array([1, 2]))]
    return NodeFuture.from_reads(4, [first_pass, second_pass])


def test_from_reads_keeps_each_shards_first_and_last_read_per_pass() -> None:
    future = _future()
    assert future.first.tolist() == [[0, 2, NEVER, NEVER], [NEVER, 20, 25, NEVER]]
    assert future.last.tolist() == [[3, 9, NEVER, NEVER], [NEVER, 20, 25, NEVER]]


def test_next_use_is_the_next_span_start_now_inside_a_span_and_never_past_the_horizon() -> None:
    future = _future()
    shards = np.array([0, 1, 2, 3])
    assert future.next_use(shards, 0).tolist() == [0, 2, 25, NEVER]
    assert future.next_use(shards, 5).tolist() == [NEVER, 5, 25, NEVER]  # shard 1 is being read
    assert future.next_use(shards, 10).tolist() == [NEVER, 20, 25, NEVER]  # shard 1 again next pass
    assert future.next_use(shards, 30).tolist() == [NEVER] * 4


def test_a_future_of_mismatched_spans_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"NodeFuture: expected first and last of one shape"):
        NodeFuture(np.zeros((1, 3), np.int64), np.zeros((1, 2), np.int64))


def test_eviction_choices_come_from_the_policy_literal() -> None:
    assert EVICTION_POLICIES == ("belady", "lru")
    assert check_eviction("lru") == "lru"


def test_an_unknown_eviction_policy_is_refused_at_construction() -> None:
    with pytest.raises(ConfigError, match=r"eviction: expected one of \['belady', 'lru'\], found 'fifo'"):
        CacheConfig(local="/tmp/cache", remote="/tmp/remote", eviction="fifo")  # type: ignore[arg-type]


def test_belady_is_the_default_eviction() -> None:
    assert CacheConfig(local="/tmp/cache", remote=None).eviction == "belady"
