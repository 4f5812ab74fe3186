"""Egress efficiency: bytes each simulated node downloads for one epoch, over the dataset's size.

P in {1, 2, 4} nodes run at once, one process each (one rank per node, 0 workers, ``batch_size=256``,
shuffle on), each with its own empty cache folder, all reading the same loopback S3 copy. Ours and
MosaicML learn the world from ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_WORLD_SIZE`` (MosaicML then joins a
gloo group by itself, through ``MASTER_ADDR`` / ``MASTER_PORT``); litdata only reads
``torch.distributed``, so its processes join a gloo group first. MosaicML coordinates the processes of
a node through ``/dev/shm``, so each of its simulated nodes runs in its own mount namespace with a
private ``/dev/shm`` (``unshare --mount``; skipped where that is not allowed). Ours and MosaicML use
``num_canonical_nodes=4``. A node's download is counted by the S3 server itself (each node signs with
its own fake access key), so it is the same measure for every library; for ours, the node statistics
are shown beside it. It is a count, not a timing, so it runs once.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import private_shm_wrapper, run_child
from benchmarks.libraries import LoaderSpec, batch_length, import_library, make_loader, s3_environment
from benchmarks.options import Options
from benchmarks.workloads import LARGE_SAMPLES, LITDATA, MOSAICML, OURS, Workload, dataset_bytes, prepare

FIGURE = "egress"
TITLE = "Egress: downloaded bytes per node for one epoch"
NODE_COUNTS = (1, 2, 4)
CANONICAL_NODES = 4
SHARD_SUFFIXES = (".mds", ".bin")
SMOKE_WORKLOAD = Workload(1_000, 8 * 1024)


def shard_bytes(folder: Path) -> int:
    return sum(
        path.stat().st_size for path in folder.rglob("*") if path.is_file() and path.suffix in SHARD_SUFFIXES
    )


def node_epoch(
    library: str, remote: str, local: str, endpoint_url: str, rank: int, world_size: int, store: str
) -> dict[str, Any]:
    """One node's epoch (this process is rank ``rank`` of ``world_size``, alone on its node)."""
    import_library(library, remote=True)
    if library == LITDATA:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
    spec = LoaderSpec(
        library,
        local,
        remote=remote,
        shuffle=True,
        num_canonical_nodes=CANONICAL_NODES,
        endpoint_url=endpoint_url,
    )
    dataset, loader = make_loader(spec)
    samples = sum(batch_length(batch) for batch in loader)
    stats = dataset.node_stats().bytes_downloaded if library == OURS else None
    return {"samples": samples, "shard_bytes": shard_bytes(Path(local)), "stats_bytes": stats}


def _node_key(library: str, nodes: int, rank: int) -> str:
    """A distinct (fake) access key per simulated node, so the server counts each node's egress."""
    return f"{library.replace('-', '')}{nodes}node{rank}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _one_layout(
    server: Any, library: str, remote: str, nodes: int, wrapper: tuple[str, ...]
) -> list[dict[str, Any]]:
    endpoint_url = server.endpoint_url
    env = s3_environment(endpoint_url)
    store_folder = tempfile.mkdtemp(prefix="bench-egress-")
    store = Path(store_folder) / "gloo-store"
    # MosaicML joins a gloo group by itself (env:// rendezvous) as soon as it sees several ranks.
    rendezvous = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}

    def node(rank: int) -> dict[str, Any]:
        layout = {"RANK": str(rank), "WORLD_SIZE": str(nodes), "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0"}
        layout.update(rendezvous, AWS_ACCESS_KEY_ID=_node_key(library, nodes, rank))
        result: dict[str, Any] = run_child(
            "benchmarks.bench_egress:node_epoch",
            env={**env, **layout},
            wrapper=wrapper,
            scratch=True,
            library=library,
            remote=remote,
            endpoint_url=endpoint_url,
            rank=rank,
            world_size=nodes,
            store=str(store),
        )
        result["served_bytes"] = server.served.by_key[_node_key(library, nodes, rank)]
        return result

    try:
        with ThreadPoolExecutor(nodes) as pool:
            return list(pool.map(node, range(nodes)))
    finally:
        shutil.rmtree(store_folder, ignore_errors=True)


def measure(options: Options) -> dict[str, Any]:
    workload = SMOKE_WORKLOAD if options.smoke else LARGE_SAMPLES
    libraries = options.libraries
    folders = prepare(options.data_root, workload, libraries)
    from benchmarks.s3 import loopback_s3  # the server (moto) lives in the harness, never in a child

    server = loopback_s3()
    private_shm = private_shm_wrapper()
    rows, skipped = [], []
    for nodes in (1, 2) if options.smoke else NODE_COUNTS:
        for library in libraries:
            wrapper: tuple[str, ...] = ()
            if library == MOSAICML and nodes > 1:
                if private_shm is None:
                    skipped.append({"library": library, "nodes": nodes})
                    continue
                wrapper = private_shm
            remote = server.remote(folders[library], f"{workload.slug}/{library}")
            per_node = _one_layout(server, library, remote, nodes, wrapper)
            rows.append(
                {
                    "library": library,
                    "nodes": nodes,
                    "per_node": per_node,
                    "dataset": shard_bytes(folders[library]),
                    "dataset_files": dataset_bytes(folders[library]),
                }
            )
    return {"workload": workload.name, "rows": rows, "skipped": skipped, "rounds": 1}


def _served_ratio(row: dict[str, Any]) -> float:
    return sum(node["served_bytes"] for node in row["per_node"]) / row["dataset_files"]


def render(result: dict[str, Any]) -> str:
    lines = [
        f'Dataset: {result["workload"]} (each library\'s own copy). "Served" is what the S3 server sent '
        'to each node (GET response bodies, counted per node by access key); "total / dataset" is their '
        "sum over the size of all the dataset's files. \"On disk\" is the shard files left in the node's "
        "cache after the epoch; litdata may delete chunks once read (it did in a trial run), so the "
        "server's count is the measure.",
        "",
        "| nodes | library | served MiB per node | total / dataset | samples per node | on disk MiB per node "
        "| ours: node stats MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in sorted(result["rows"], key=lambda r: (r["nodes"], r["library"] != OURS)):
        per_node = row["per_node"]
        served = ", ".join(f"{node['served_bytes'] / 2**20:,.0f}" for node in per_node)
        on_disk = ", ".join(f"{node['shard_bytes'] / 2**20:,.0f}" for node in per_node)
        samples = ", ".join(f"{node['samples']:,}" for node in per_node)
        stats = [node["stats_bytes"] for node in per_node]
        shown = ", ".join(f"{value / 2**20:,.0f}" for value in stats) if None not in stats else "-"
        lines.append(
            f"| {row['nodes']} | {row['library']} | {served} | {_served_ratio(row):.2f}x | {samples} | "
            f"{on_disk} | {shown} |"
        )
    for row in result.get("skipped", []):
        lines.append(
            f"| {row['nodes']} | {row['library']} | not measured: its simulated nodes need a private /dev/shm "
            "each (`unshare --mount`), not allowed here | | | | |"
        )
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    checks = []
    for row in result["rows"]:
        if row["library"] == OURS:
            total = _served_ratio(row)
            what = f"egress on {row['nodes']} nodes <= 1.1x the dataset"
            checks.append((what, f"{total:.2f}x", total <= 1.1))
    return checks
