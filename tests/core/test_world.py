import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.reading.world import World, detect_worker, detect_world


def test_single_process_is_rank_zero_of_one() -> None:
    assert detect_world({}) == World(rank=0, world_size=1, local_rank=0, local_world_size=1)


def test_launcher_environment_sets_ranks_and_nodes() -> None:
    env = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    world = detect_world(env)
    assert (world.rank, world.world_size, world.local_rank, world.num_nodes, world.node) == (5, 8, 1, 2, 1)


def test_local_world_size_must_divide_world_size() -> None:
    with pytest.raises(ConfigError, match="expected a divisor of world_size=8 .* found 3"):
        detect_world({"RANK": "0", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "3"})


def test_non_integer_environment_is_named() -> None:
    with pytest.raises(ConfigError, match="RANK: expected an integer environment variable, found 'x'"):
        detect_world({"RANK": "x"})


def test_main_process_has_no_worker() -> None:
    assert detect_worker() == (0, 0)
