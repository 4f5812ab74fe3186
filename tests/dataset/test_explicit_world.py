"""An explicit ``World`` replaces detection: the same samples as the launcher's environment would give."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

from stream_plugin import ConfigError, StreamingDataset, World

_LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
# Two nodes of two ranks: the node layout decides the canonical nodes, so it shapes every rank's samples.
_TWO_NODES_OF_TWO = [
    World(rank=rank, world_size=4, local_rank=rank % 2, local_world_size=2) for rank in range(4)
]


def make_dataset(remote: Path, cache: Path, world: World | None = None) -> StreamingDataset:
    return StreamingDataset(
        remote=f"file://{remote}", local=str(cache), batch_size=8, shuffle=True, world=world
    )


def sample_ids(dataset: StreamingDataset) -> list[int]:
    return [sample["id"] for sample in dataset]


def set_launcher_environment(monkeypatch: pytest.MonkeyPatch, world: World) -> None:
    monkeypatch.setenv("RANK", str(world.rank))
    monkeypatch.setenv("WORLD_SIZE", str(world.world_size))
    monkeypatch.setenv("LOCAL_RANK", str(world.local_rank))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(world.local_world_size))


def clear_launcher_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("world", _TWO_NODES_OF_TWO, ids=lambda world: f"rank{world.rank}")
def test_explicit_world_gives_each_rank_the_samples_the_launcher_environment_would(
    remote_1k: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world: World
) -> None:
    set_launcher_environment(monkeypatch, world)
    from_environment = make_dataset(remote_1k, tmp_path / "env")
    clear_launcher_environment(monkeypatch)
    explicit = make_dataset(remote_1k, tmp_path / "explicit", world=world)
    assert explicit.world == from_environment.world == world
    assert sample_ids(explicit) == sample_ids(from_environment)


def test_explicit_world_overrides_what_the_environment_says(
    remote_1k: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The environment describes one node of four ranks (what Lightning's launcher exports on two nodes).
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    one_node = make_dataset(remote_1k, tmp_path / "one-node")
    two_nodes = make_dataset(remote_1k, tmp_path / "two-nodes", world=_TWO_NODES_OF_TWO[1])
    assert (one_node.world.num_nodes, two_nodes.world.num_nodes) == (1, 2)
    assert sample_ids(two_nodes) != sample_ids(one_node)


def test_explicit_world_survives_pickling_to_workers(
    remote_1k: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clear_launcher_environment(monkeypatch)
    world = _TWO_NODES_OF_TWO[3]
    dataset = make_dataset(remote_1k, tmp_path, world=world)
    copy = pickle.loads(pickle.dumps(dataset))  # what a spawned DataLoader worker receives
    assert copy.world == world
    assert sample_ids(copy) == sample_ids(dataset)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: World(rank=4, world_size=4),
            r"rank: expected 0 <= rank < world_size=4, found 4; check RANK",
        ),
        (
            lambda: World(rank=0, world_size=4, local_world_size=3),
            r"local_world_size: expected a divisor of world_size=4 .*found 3",
        ),
        (lambda: World(rank="0"), r"World.rank: expected an int, found str '0'"),  # type: ignore[arg-type]
    ],
    ids=["rank-outside-world", "uneven-nodes", "not-an-int"],
)
def test_an_impossible_world_is_rejected_when_built(build: Callable[[], World], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build()


def test_a_world_whose_local_rank_disagrees_with_its_node_is_rejected(
    remote_1k: Path, tmp_path: Path
) -> None:
    world = World(rank=3, world_size=4, local_rank=0, local_world_size=2)
    with pytest.raises(
        ConfigError,
        match=r"world.local_rank: expected rank % local_world_size = 3 % 2 = 1 \(ranks fill nodes in order\), "
        r"found 0",
    ):
        make_dataset(remote_1k, tmp_path, world=world)


def test_a_world_that_is_not_a_world_is_rejected(remote_1k: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"world: expected a stream_plugin.World or None, found tuple"):
        make_dataset(remote_1k, tmp_path, world=(0, 1))  # type: ignore[arg-type]
