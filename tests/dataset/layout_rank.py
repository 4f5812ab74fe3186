"""One rank of an 8-rank gloo job that reads a dataset under several parallelism layouts in one run.

Run with RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / MASTER_ADDR / MASTER_PORT set (as
``support.ranks.launch_ranks`` does). ``--scenarios`` is a JSON list; each scenario builds a real
DeviceMesh (``torch.distributed.device_mesh.init_device_mesh``), a StreamingDataset over it and a
StreamingDataLoader, reads, and reports. Prints one JSON object: each scenario's result by name.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from stream_plugin import StreamingDataLoader, StreamingDataset, mesh_coordinates

GLOBAL_BATCH = 8


def build(scenario: dict[str, Any], remote: str, cache: str, states: dict[str, Any]) -> tuple[Any, Any]:
    """The dataset and loader a scenario describes (its mesh built on every rank)."""
    options: dict[str, Any] = {}
    truth: Any = True
    if "partial_mesh" in scenario:  # a mesh of some ranks only, handed to every rank
        from torch.distributed.device_mesh import DeviceMesh

        options["data_parallel_mesh"] = DeviceMesh("cpu", scenario["partial_mesh"])
        truth = list(range(len(scenario["partial_mesh"]))) * (dist.get_world_size() // len(scenario["partial_mesh"]))
    if "mesh" in scenario:
        names = tuple(scenario["mesh"])
        mesh = init_device_mesh("cpu", tuple(scenario["shape"]), mesh_dim_names=names)
        dims = tuple(scenario["dp"])
        sub = mesh[dims] if len(dims) > 1 else mesh[dims[0]]
        truth = list(mesh_coordinates(sub))
        if scenario.get("form") == "ints":
            coordinate = sub.get_coordinate()
            flat = 0
            for index, size in zip(coordinate, sub.shape):
                flat = flat * size + index
            options.update(data_parallel_rank=flat, data_parallel_size=sub.size())
        elif scenario.get("form") != "none":
            options["data_parallel_mesh"] = sub
    if "replication" in scenario:
        options["replication"] = scenario["replication"]
    size = len(set(truth)) if truth is not True else dist.get_world_size() // scenario.get("replication", 1)
    seed = scenario.get("seed", 7) + (dist.get_rank() if scenario.get("seed_per_rank") else 0)
    dataset = StreamingDataset(
        remote=remote,
        local=os.path.join(cache, scenario["name"], f"node{dist.get_rank() // int(os.environ['LOCAL_WORLD_SIZE'])}"),
        batch_size=GLOBAL_BATCH // size,
        shuffle=True,
        shuffle_seed=seed,
        num_canonical_nodes=2,
        cache_limit=scenario.get("cache_limit"),
        **options,
    )
    check = truth if scenario.get("check", "truth") == "truth" else True
    loader = StreamingDataLoader(
        dataset, batch_size=GLOBAL_BATCH // size, num_workers=scenario.get("workers", 0), check_layout=check
    )
    if "resume_from" in scenario:
        loader.load_state_dict(states[scenario["resume_from"]])
    return dataset, loader


def run(scenario: dict[str, Any], remote: str, cache: str, states: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The scenario's result, and its dataset (None after an error)."""
    try:
        dataset, loader = build(scenario, remote, cache, states)
        batches: list[list[int]] = []
        counted: list[int] = []
        length = len(loader)
        for index, batch in enumerate(loader):
            ids = batch["id"].tolist()
            batches.append(ids)
            counted.extend(ids[: loader.real_samples(index)])
            if len(batches) == scenario.get("stop_after", -1):
                break
        state = loader.state_dict()
        states[scenario["name"]] = state
        return {
            "batches": batches,
            "counted": counted,
            "len": length,
            "state": state,
            "coordinate": dataset.data_parallel_rank,
            "size": dataset.data_parallel_size,
        }, dataset
    except Exception as error:  # reported, so the test can match the message on every rank
        return {"error": type(error).__name__, "message": str(error)}, None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--remote", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--scenarios", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    states: dict[str, Any] = {}
    results = {}
    for scenario in json.loads(args.scenarios):
        result, dataset = run(scenario, args.remote, args.cache, states)
        dist.barrier()  # every rank of the node has read: its node's counters are complete
        if dataset is not None:
            result["node_downloads"] = dataset.node_stats().shards_downloaded
        results[scenario["name"]] = result
        dist.barrier()
    print(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
