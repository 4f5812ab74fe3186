"""The eviction rules (``cache.eviction_rules``): pure decisions the cache and the simulator both call."""

from __future__ import annotations

import numpy as np

from stream_plugin.cache import eviction, eviction_rules
from stream_plugin.cache.eviction_rules import Ahead, eviction_order, room_to_make, victims_to_free
from stream_plugin.cache.future import NEVER
from stream_plugin.simulate import engine


def ahead(
    *, keep_before: int = 50, within_reach: bool = True, missing: bool = False, idle: int = 10**9
) -> Ahead:
    return Ahead(keep_before, within_reach, lambda: missing, lambda wanted: idle >= wanted)


def test_a_download_on_demand_makes_whatever_room_it_needs() -> None:
    assert room_to_make(need=30, usage=50, limit=100) == -20  # fits now
    assert room_to_make(need=30, usage=90, limit=100) == 20


def test_a_download_ahead_waits_for_a_shard_read_before_its_own() -> None:
    assert room_to_make(30, 0, 100, ahead(missing=True)) is None
    assert room_to_make(30, 0, 100, ahead(missing=False)) == -70


def test_a_download_ahead_leaves_room_for_a_download_on_demand() -> None:
    # 80 of 100 used: placing 30 ahead means evicting 10, and one on demand of 30 more needs 40 idle.
    assert room_to_make(30, 80, 100, ahead(idle=39)) is None
    assert room_to_make(30, 80, 100, ahead(idle=40)) == 10
    # With room for both, free, no idle shard is needed.
    assert room_to_make(30, 40, 100, ahead(idle=0)) == -30
    assert room_to_make(30, 50, 100, ahead(idle=0)) is None  # 20 left: not enough for one on demand


def test_a_download_ahead_beyond_the_reach_only_takes_free_room() -> None:
    assert room_to_make(30, 80, 100, ahead(within_reach=False)) is None
    assert room_to_make(30, 40, 100, ahead(within_reach=False)) == -30


def test_belady_evicts_farthest_next_use_first_and_a_download_ahead_keeps_what_is_read_before_it() -> None:
    next_uses = np.array([40, NEVER, 10, 90], np.int64)  # given least recently used first
    assert eviction_order("belady", 4, next_uses).tolist() == [1, 3, 0, 2]
    assert eviction_order("belady", 4, next_uses, keep_before=40).tolist() == [1, 3]
    assert eviction_order("lru", 4, next_uses).tolist() == [0, 1, 2, 3]
    assert eviction_order("belady", 4, None).tolist() == [0, 1, 2, 3]  # future unknown: LRU


def test_victims_to_free_takes_the_fewest_from_the_first() -> None:
    assert victims_to_free(25, [10, 10, 10, 10], all_or_nothing=False) == 3
    assert victims_to_free(0, [10], all_or_nothing=False) == 0
    assert victims_to_free(50, [10, 10], all_or_nothing=False) == 2  # all it can, then it waits
    assert victims_to_free(50, [10, 10], all_or_nothing=True) == 0  # a download ahead evicts nothing


def test_the_cache_and_the_simulator_call_the_same_rules() -> None:
    for name in ("room_to_make", "eviction_order", "victims_to_free", "Ahead"):
        rule = getattr(eviction_rules, name)
        assert getattr(eviction, name) is rule, name
        assert getattr(engine, name) is rule, name
