"""Parallelism layouts on a real 8-rank gloo job (2 nodes x 4 ranks) with real DeviceMeshes.

Every layout is checked against a plain data-parallel run of its data-parallel size, read here rank
by rank with no mesh and no process group (the reference), and against the mesh's own definition
(row-major coordinates, computed here with numpy, not by the library):

- replicas (ranks with one data-parallel coordinate) get identical batches;
- global step t (the coordinates' batches in order) equals step t of the plain run, so different
  coordinates read disjoint samples;
- ``real_samples`` counts every sample of the epoch exactly once over the world (exact evaluation);
- a state saved at step 3 under (dp=4, tp=2) resumes under (dp=2, tp=4), dp=8 and (pp=2, dp=2, tp=2)
  with the uninterrupted sequence;
- a wrong layout fails at the first batch on every rank, with the ranks and the fix.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.datasets import write_ids
from support.ranks import launch_ranks

from stream_plugin import StreamingDataLoader, StreamingDataset, World

SCRIPT = Path(__file__).with_name("layout_rank.py")
WORLD, RANKS_PER_NODE, GLOBAL_BATCH, SAMPLES = 8, 4, 8, 203  # 25 whole global batches and 3 samples
SEED, CANONICAL_NODES, STOP = 7, 2, 3

LAYOUTS = {
    "pp_dp_tp": {"mesh": ["pp", "dp", "tp"], "shape": [2, 2, 2], "dp": ["dp"]},
    "dp_pp_tp": {"mesh": ["dp", "pp", "tp"], "shape": [2, 2, 2], "dp": ["dp"]},
    "tp_pp_dp": {"mesh": ["tp", "pp", "dp"], "shape": [2, 2, 2], "dp": ["dp"]},
    "dp4_tp2": {"mesh": ["dp", "tp"], "shape": [4, 2], "dp": ["dp"], "stop_after": STOP},
    "dp2_cp4": {"mesh": ["dp", "cp"], "shape": [2, 4], "dp": ["dp"]},
    "cp4_dp2": {"mesh": ["cp", "dp"], "shape": [4, 2], "dp": ["dp"], "workers": 2},
    "ints_tp_dp": {"mesh": ["tp", "dp"], "shape": [2, 4], "dp": ["dp"], "form": "ints"},
    "tp_dp_limited": {"mesh": ["tp", "dp"], "shape": [2, 4], "dp": ["dp"], "cache_limit": "12kb"},
    "hsdp_tp": {"mesh": ["dp_replicate", "dp_shard", "tp"], "shape": [2, 2, 2], "dp": ["dp_replicate", "dp_shard"]},
}
RESUMED = {
    "dp2_tp4_resumed": {"mesh": ["dp", "tp"], "shape": [2, 4], "dp": ["dp"], "resume_from": "dp4_tp2"},
    "dp8_resumed": {"resume_from": "dp4_tp2"},
    "pp_dp_tp_resumed": {"mesh": ["pp", "dp", "tp"], "shape": [2, 2, 2], "dp": ["dp"], "resume_from": "dp4_tp2"},
}
WRONG = {
    # tp outermost: the replicas of coordinate d are ranks d and d + 4, not two consecutive ranks.
    "wrong_replication": {"mesh": ["tp", "dp"], "shape": [2, 4], "dp": ["dp"], "form": "none", "replication": 2},
    "replication_contradicts_mesh": {"mesh": ["tp", "dp"], "shape": [2, 4], "dp": ["dp"], "replication": 2},
    "mesh_without_ranks": {"partial_mesh": [0, 1, 2, 3]},
    "seed_per_rank": {"mesh": ["dp", "tp"], "shape": [4, 2], "dp": ["dp"], "check": "own", "seed_per_rank": True},
}


def expected_coordinates(layout: dict[str, Any]) -> list[int]:
    """The data-parallel coordinate of each global rank by the mesh's definition: ranks fill the mesh in
    row-major order, and the data-parallel dims' indices are flattened row-major."""
    if "mesh" not in layout:
        return list(range(WORLD))
    shape, names = layout["shape"], layout["mesh"]
    dims = [names.index(name) for name in layout["dp"]]
    coordinates = []
    for rank in range(WORLD):
        index = np.unravel_index(rank, shape)
        coordinates.append(int(np.ravel_multi_index([index[d] for d in dims], [shape[d] for d in dims])))
    return coordinates


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ids(tmp_path_factory.mktemp("layouts") / "data", range(SAMPLES), size_limit=1 << 10)


def plain_run(remote: Path, cache: Path, size: int) -> list[list[list[int]]]:
    """A plain data-parallel run of ``size`` ranks, no mesh and no process group: each rank's batches."""
    per_rank = []
    for rank in range(size):
        dataset = StreamingDataset(
            remote=f"file://{remote}",
            local=str(cache / f"plain{size}"),
            batch_size=GLOBAL_BATCH // size,
            shuffle=True,
            shuffle_seed=SEED,
            num_canonical_nodes=CANONICAL_NODES,
            world=World(rank=rank, world_size=size, local_rank=rank, local_world_size=size),
        )
        loader = StreamingDataLoader(dataset, batch_size=GLOBAL_BATCH // size)
        per_rank.append([batch["id"].tolist() for batch in loader])
    return per_rank


def global_steps(per_coordinate: list[list[list[int]]]) -> list[list[int]]:
    return [sum((batches[t] for batches in per_coordinate), []) for t in range(len(per_coordinate[0]))]


@pytest.fixture(scope="module")
def job(remote: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every scenario, run in one 8-rank job; result[name][rank]."""
    scenarios = [{"name": name, **layout} for name, layout in {**LAYOUTS, **RESUMED, **WRONG}.items()]
    command = [sys.executable, str(SCRIPT), "--remote", f"file://{remote}"]
    command += ["--cache", str(tmp_path_factory.mktemp("cache")), "--scenarios", json.dumps(scenarios)]
    outputs = launch_ranks(command, world=WORLD, ranks_per_node=RANKS_PER_NODE, timeout=300)
    return {name: [output[name] for output in outputs] for name in outputs[0]}


@pytest.fixture(scope="module")
def plain(remote: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[list[list[int]]]]:
    cache = tmp_path_factory.mktemp("plain")
    return {size: plain_run(remote, cache, size) for size in (2, 4, 8)}


def by_coordinate(results: list[dict[str, Any]], coordinates: list[int]) -> dict[int, list[int]]:
    ranks: dict[int, list[int]] = {}
    for rank, coordinate in enumerate(coordinates):
        assert "error" not in results[rank], results[rank]
        ranks.setdefault(coordinate, []).append(rank)
    return ranks


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_a_layout_reads_the_batches_of_a_plain_data_parallel_run(
    name: str, job: dict[str, list[dict[str, Any]]], plain: dict[int, list[list[list[int]]]]
) -> None:
    results, coordinates = job[name], expected_coordinates(LAYOUTS[name])
    groups = by_coordinate(results, coordinates)
    size = len(groups)
    for coordinate, ranks in groups.items():
        assert [results[r]["coordinate"] for r in ranks] == [coordinate] * len(ranks)
        assert all(results[r]["batches"] == results[ranks[0]]["batches"] for r in ranks), f"replicas {ranks} differ"
        assert all(results[r]["len"] == len(plain[size][coordinate]) for r in ranks)
    steps = global_steps([results[groups[c][0]]["batches"] for c in range(size)])
    reference = global_steps(plain[size])
    assert steps == reference[: len(steps)]
    if name != "dp4_tp2":  # read to the end of the epoch: evaluation counts every sample once
        assert len(steps) == len(reference)
        counted = sorted(i for result in results for i in result["counted"])
        assert counted == list(range(SAMPLES))


def shard_of(remote: Path) -> np.ndarray:
    """The shard of each sample id, from the index the writer wrote."""
    index = json.loads((remote / "index.json").read_text())
    return np.repeat(np.arange(len(index["shards"])), [shard["samples"] for shard in index["shards"]])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(LAYOUTS) - {"dp4_tp2", "tp_dp_limited"}))
def test_a_node_downloads_each_shard_its_ranks_read_once(
    name: str, job: dict[str, list[dict[str, Any]]], remote: Path
) -> None:
    """However many of a node's ranks are replicas, the node's cache downloads a shard once."""
    shards = shard_of(remote)
    for node in range(WORLD // RANKS_PER_NODE):
        ranks = range(node * RANKS_PER_NODE, (node + 1) * RANKS_PER_NODE)
        read = {int(shards[i]) for r in ranks for batch in job[name][r]["batches"] for i in batch}
        assert {job[name][r]["node_downloads"] for r in ranks} == {len(read)}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RESUMED))
def test_a_state_resumes_on_another_layout_with_the_uninterrupted_sequence(
    name: str, job: dict[str, list[dict[str, Any]]], plain: dict[int, list[list[list[int]]]]
) -> None:
    saved = job["dp4_tp2"]
    assert len({json.dumps(result["state"], sort_keys=True) for result in saved}) == 1  # rank-independent
    results, coordinates = job[name], expected_coordinates(RESUMED[name])
    groups = by_coordinate(results, coordinates)
    size = len(groups)
    before = global_steps([saved[by_coordinate(saved, expected_coordinates(LAYOUTS["dp4_tp2"]))[c][0]]["batches"] for c in range(4)])
    after = global_steps([results[groups[c][0]]["batches"] for c in range(size)])
    assert [sorted(step) for step in before] == [sorted(step) for step in global_steps(plain[4])[:STOP]]
    assert after == global_steps(plain[size])[STOP:]
    for ranks in groups.values():
        assert all(results[r]["batches"] == results[ranks[0]]["batches"] for r in ranks)


@pytest.mark.slow
def test_a_wrong_replication_is_caught_at_the_first_batch(job: dict[str, list[dict[str, Any]]]) -> None:
    for rank, result in enumerate(job["wrong_replication"]):
        assert result["error"] == "LayoutError", result
        assert "expected ranks [0, 4]" in result["message"], result["message"]
        assert "the dataset splits them" in result["message"]
        assert "data_parallel_mesh=mesh['dp']" in result["message"], rank


@pytest.mark.slow
def test_a_replication_that_contradicts_the_mesh_is_refused(job: dict[str, list[dict[str, Any]]]) -> None:
    for result in job["replication_contradicts_mesh"]:
        assert result["error"] == "ConfigError", result
        assert "replication: expected it to agree with data_parallel_mesh" in result["message"]
        assert "found replication=2" in result["message"]


@pytest.mark.slow
def test_replicas_with_different_settings_are_caught_at_the_first_batch(
    job: dict[str, list[dict[str, Any]]],
) -> None:
    for result in job["seed_per_rank"]:
        assert result["error"] == "LayoutError", result
        assert "got different first batches" in result["message"]
        assert "its settings differ between them" in result["message"]


@pytest.mark.slow
def test_a_mesh_that_leaves_ranks_out_is_refused_on_every_rank(job: dict[str, list[dict[str, Any]]]) -> None:
    for result in job["mesh_without_ranks"]:
        assert result["error"] == "ConfigError", result
        assert "expected a mesh that contains every rank" in result["message"]
        assert "found ranks [4, 5, 6, 7] outside theirs" in result["message"]
