"""Egress efficiency: bytes each simulated node downloads for one epoch, over the dataset's size.

P in {1, 2, 4} nodes run at once, one process each (one rank per node, 0 workers, ``batch_size=256``,
shuffle on), each with its own empty cache folder, all reading the same loopback S3 copy. Ours and
MosaicML learn the world from ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_WORLD_SIZE``; litdata only reads
``torch.distributed``, so its processes also join a gloo group. Ours and MosaicML use
``num_canonical_nodes=4``. A node's download is the size of the shard files in its cache folder after
the epoch (no cache limit, so nothing is evicted); for ours, the node statistics are shown beside it.
It is a count, not a timing, so it runs once.
"""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.bench_cold import fresh_folder
from benchmarks.common import run_child
from benchmarks.libraries import LoaderSpec, batch_length, import_library, make_loader, s3_environment
from benchmarks.options import Options
from benchmarks.workloads import LARGE_SAMPLES, LITDATA, OURS, Workload, prepare

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
    library: str, remote: str, endpoint_url: str, rank: int, world_size: int, store: str
) -> dict[str, Any]:
    """One node's epoch (this process is rank ``rank`` of ``world_size``, alone on its node)."""
    import_library(library, remote=True)
    if library == LITDATA:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
    with fresh_folder() as local:
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


def _one_layout(library: str, remote: str, endpoint_url: str, nodes: int) -> list[dict[str, Any]]:
    env = s3_environment(endpoint_url)
    store = Path(tempfile.mkdtemp(prefix="bench-egress-")) / "gloo-store"

    def node(rank: int) -> dict[str, Any]:
        layout = {"RANK": str(rank), "WORLD_SIZE": str(nodes), "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0"}
        return run_child(  # type: ignore[no-any-return]
            "benchmarks.bench_egress:node_epoch",
            env={**env, **layout},
            library=library,
            remote=remote,
            endpoint_url=endpoint_url,
            rank=rank,
            world_size=nodes,
            store=str(store),
        )

    with ThreadPoolExecutor(nodes) as pool:
        return list(pool.map(node, range(nodes)))


def measure(options: Options) -> dict[str, Any]:
    workload = SMOKE_WORKLOAD if options.smoke else LARGE_SAMPLES
    libraries = options.libraries
    folders = prepare(options.data_root, workload, libraries)
    from benchmarks.s3 import loopback_s3  # the server (moto) lives in the harness, never in a child

    server = loopback_s3()
    rows = []
    for nodes in (1, 2) if options.smoke else NODE_COUNTS:
        for library in libraries:
            remote = server.remote(folders[library], f"{workload.slug}/{library}")
            per_node = _one_layout(library, remote, server.endpoint_url, nodes)
            rows.append(
                {
                    "library": library,
                    "nodes": nodes,
                    "per_node": per_node,
                    "dataset": shard_bytes(folders[library]),
                }
            )
    return {"workload": workload.name, "rows": rows}


def render(result: dict[str, Any]) -> str:
    lines = [
        f"Dataset: {result['workload']} (each library's own copy; the ratio uses its own shard bytes).",
        "",
        "| nodes | library | MiB per node | total / dataset | samples per node | ours: node stats MiB |",
        "|---|---|---|---|---|---|",
    ]
    for row in sorted(result["rows"], key=lambda r: (r["nodes"], r["library"] != OURS)):
        per_node = row["per_node"]
        mib = ", ".join(f"{node['shard_bytes'] / 2**20:,.0f}" for node in per_node)
        total = sum(node["shard_bytes"] for node in per_node) / row["dataset"]
        samples = ", ".join(f"{node['samples']:,}" for node in per_node)
        stats = [node["stats_bytes"] for node in per_node]
        shown = ", ".join(f"{value / 2**20:,.0f}" for value in stats) if None not in stats else "-"
        lines.append(f"| {row['nodes']} | {row['library']} | {mib} | {total:.2f}x | {samples} | {shown} |")
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    checks = []
    for row in result["rows"]:
        if row["library"] == OURS:
            total = sum(node["shard_bytes"] for node in row["per_node"]) / row["dataset"]
            checks.append(
                (f"egress on {row['nodes']} nodes <= 1.1x the dataset", f"{total:.2f}x", total <= 1.1)
            )
    return checks
