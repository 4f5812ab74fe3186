"""Egress over epochs: bytes downloaded by N nodes over 6 epochs, against the cache each node has.

The shape of issue 28: 96 equal shards (50 samples of 1 KiB each), shuffle on (`block`, MosaicML's
`py1e`, with blocks of 2 shards), 8 canonical nodes, batch 16 per node, 6 epochs, on 2, 4 and 8
nodes. Each node's cache holds 25%, 50%, 75% or all of the node's share (96 / N shards).

**Ours** runs for real: each simulated node is one process (one rank, with 0 or 2 DataLoader
workers) with its own empty cache folder, reading a loopback S3 server (moto) whose sent bytes are
counted per node. After each epoch the node reports `node_stats().bytes_downloaded` (the server's count over the whole run is kept
in the JSON record), once with `eviction="belady"` (the default: evict the shard this node reads again
farthest ahead) and, with 0 workers, once with `eviction="lru"`. A cell whose cache is below the
loader's floor (3 shards a reader: 8 nodes, a quarter, 2 workers) is left out. Each node's seconds per
epoch are kept (the stalls: the loopback server answers at once, so waiting for data is most of it).
From the shards each node actually read, two yardsticks of the same capacity: an ideal LRU cache and the offline optimum (Belady), computed by
`stream_plugin.simulate.ideal_caches`.

**MosaicML Streaming 0.13** is counted, not run: its own `get_shuffle("py1e", ...)` and
`get_partitions("relaxed", ...)` give each node's reads, and an ideal LRU cache of the same capacity
(its cache evicts the least recently used shard) counts the downloads. That is a lower bound on what
it downloads for real.

Egress is shown as a multiple of the dataset's size. It is a count, not a timing, so it runs once.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import run_child
from benchmarks.libraries import s3_environment
from benchmarks.options import Options
from benchmarks.workloads import MOSAICML

FIGURE = "egress_epochs"
TITLE = "Egress over epochs: downloads against the node cache (issue 28)"
SHARDS = 96
SAMPLES_PER_SHARD = 50
SAMPLE_BYTES = 1000
BLOCK_SHARDS = 2
CANONICAL_NODES = 8
DEVICE_BATCH = 16
EPOCHS = 6
NODE_COUNTS = (2, 4, 8)
FRACTIONS = (0.25, 0.5, 0.75, 1.0)
POLICIES = ("belady", "lru")
WORKERS = (0, 2)  # DataLoader workers of the node's one rank
SEED = 9176
SMOKE_NODES, SMOKE_FRACTIONS, SMOKE_EPOCHS = (2,), (0.5, 1.0), 2
READERS_FLOOR_SHARDS = 3  # shards a reader must have room for (the loader's floor under a cache_limit)


def write_dataset(folder: Path) -> int:
    """The 96-shard dataset (ids in shard order); returns one shard's bytes."""
    from stream_plugin import MDSWriter

    size_limit = SAMPLES_PER_SHARD * (SAMPLE_BYTES + 16) + 1024  # exactly SAMPLES_PER_SHARD a shard
    with MDSWriter(
        out=str(folder), columns={"id": "int64", "data": "bytes"}, size_limit=size_limit
    ) as writer:
        for index in range(SHARDS * SAMPLES_PER_SHARD):
            writer.write({"id": index, "data": bytes(SAMPLE_BYTES)})
    shards = json.loads((folder / "index.json").read_text())["shards"]
    sizes = {shard["raw_data"]["bytes"] for shard in shards}
    assert len(shards) == SHARDS and {s["samples"] for s in shards} == {SAMPLES_PER_SHARD} and len(sizes) == 1
    return sizes.pop()


def node_epochs(
    remote: str,
    local: str,
    rank: int,
    nodes: int,
    epochs: int,
    cache_limit: int | None,
    eviction: str,
    workers: int = 0,
) -> dict[str, Any]:
    """One node's run (rank ``rank`` of ``nodes``, alone on its node): shards read and bytes downloaded
    after each epoch."""
    from stream_plugin import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(
        remote=remote,
        local=local,
        batch_size=DEVICE_BATCH,
        shuffle=True,
        shuffle_algo="block",
        shuffle_block_size=BLOCK_SHARDS * SAMPLES_PER_SHARD,
        shuffle_seed=SEED,
        num_canonical_nodes=CANONICAL_NODES,
        cache_limit=cache_limit,
        eviction=eviction,
    )
    loader = StreamingDataLoader(dataset, batch_size=DEVICE_BATCH, num_workers=workers)
    reads: list[list[int]] = []
    downloaded: list[int] = []
    seconds: list[float] = []
    for _ in range(epochs):
        start = time.perf_counter()
        shards = [
            int(sample_id) // SAMPLES_PER_SHARD for batch in loader for sample_id in batch["id"].tolist()
        ]
        seconds.append(time.perf_counter() - start)
        reads.append(_runs(shards))
        downloaded.append(int(dataset.node_stats().bytes_downloaded))
    return {"reads": reads, "downloaded": downloaded, "seconds": seconds}


def _runs(shards: list[int]) -> list[int]:
    """Consecutive repeats dropped: a cache's hits and misses do not change."""
    return [shard for index, shard in enumerate(shards) if index == 0 or shard != shards[index - 1]]


def mosaicml_reads(nodes: int, epochs: int) -> list[list[list[int]]]:
    """Per node, per epoch: the shards MosaicML 0.13 reads, from its own shuffle and partition."""
    from streaming.base.partition import get_partitions
    from streaming.base.shuffle import get_shuffle

    sizes = np.full(SHARDS, SAMPLES_PER_SHARD, dtype=np.int64)
    per_node: list[list[list[int]]] = [[] for _ in range(nodes)]
    for epoch in range(epochs):
        shuffle = get_shuffle("py1e", sizes, CANONICAL_NODES, SEED, epoch, BLOCK_SHARDS * SAMPLES_PER_SHARD)
        ids = get_partitions(
            "relaxed", SHARDS * SAMPLES_PER_SHARD, CANONICAL_NODES, nodes, 1, 1, DEVICE_BATCH
        )
        ids = np.where(ids == -1, -1, shuffle[ids])  # (nodes, ranks, workers, batches, batch)
        for node in range(nodes):
            flat = ids[node].reshape(-1)
            per_node[node].append(_runs((flat[flat >= 0] // SAMPLES_PER_SHARD).tolist()))
    return per_node


def _capacity(fraction: float, nodes: int) -> int | None:
    """The cache's capacity in shards; None: it holds the node's whole share (no limit)."""
    return None if fraction >= 1.0 else max(1, int(fraction * SHARDS // nodes))


def _yardsticks(reads: list[list[int]], capacity: int | None) -> tuple[list[int], list[int]]:
    """Ideal LRU and Belady downloads after each epoch, on the node's read sequence (cumulative)."""
    from stream_plugin.simulate.ideal_caches import belady_misses, lru_misses

    lru, optimum = [], []
    for epoch in range(1, len(reads) + 1):
        sequence = [shard for part in reads[:epoch] for shard in part]
        if capacity is None:
            lru.append(len(set(sequence)))
            optimum.append(len(set(sequence)))
        else:
            lru.append(lru_misses(sequence, capacity))
            optimum.append(belady_misses(sequence, capacity))
    return lru, optimum


def _layout(
    server: Any,
    remote: str,
    nodes: int,
    epochs: int,
    fraction: float,
    eviction: str,
    shard_bytes: int,
    workers: int = 0,
) -> dict[str, Any]:
    capacity = _capacity(fraction, nodes)
    cache_limit = None if capacity is None else capacity * shard_bytes + 512
    env = s3_environment(server.endpoint_url)
    key = f"egress{nodes}n{int(fraction * 100)}{eviction}w{workers}"

    def node(rank: int) -> dict[str, Any]:
        layout = {"RANK": str(rank), "WORLD_SIZE": str(nodes), "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0"}
        layout["AWS_ACCESS_KEY_ID"] = f"{key}r{rank}"
        result: dict[str, Any] = run_child(
            "benchmarks.bench_egress_epochs:node_epochs",
            env={**env, **layout},
            scratch=True,
            remote=remote,
            rank=rank,
            nodes=nodes,
            epochs=epochs,
            cache_limit=cache_limit,
            eviction=eviction,
            workers=workers,
        )
        result["served_bytes"] = server.served.by_key[f"{key}r{rank}"]
        result["lru"], result["optimum"] = _yardsticks(result["reads"], capacity)
        del result["reads"]
        return result

    with ThreadPoolExecutor(nodes) as pool:
        per_node = list(pool.map(node, range(nodes)))
    return {
        "nodes": nodes,
        "fraction": fraction,
        "eviction": eviction,
        "workers": workers,
        "capacity": capacity,
        "per_node": per_node,
    }


def measure(options: Options) -> dict[str, Any]:
    from benchmarks.s3 import loopback_s3

    node_counts = SMOKE_NODES if options.smoke else NODE_COUNTS
    fractions = SMOKE_FRACTIONS if options.smoke else FRACTIONS
    epochs = SMOKE_EPOCHS if options.smoke else EPOCHS
    folder = Path(tempfile.mkdtemp(prefix="bench-egress-epochs-"))
    server = loopback_s3()
    try:
        shard_bytes = write_dataset(folder / "data")
        remote = server.remote(folder / "data", "egress-epochs")
        rows = []
        for workers in WORKERS[:1] if options.smoke else WORKERS:
            for nodes in node_counts:
                for fraction in fractions:
                    capacity = _capacity(fraction, nodes)
                    if capacity is not None and capacity < READERS_FLOOR_SHARDS * max(workers, 1):
                        continue  # below the loader's floor: it refuses the cache_limit
                    for eviction in POLICIES if fraction < 1.0 and not workers else POLICIES[:1]:
                        rows.append(
                            _layout(server, remote, nodes, epochs, fraction, eviction, shard_bytes, workers)
                        )
        mosaicml = []
        if MOSAICML in options.libraries:
            for nodes in node_counts:
                reads = mosaicml_reads(nodes, epochs)
                for fraction in fractions:
                    capacity = _capacity(fraction, nodes)
                    lru = [_yardsticks(node_reads, capacity)[0] for node_reads in reads]
                    mosaicml.append(
                        {"nodes": nodes, "fraction": fraction, "capacity": capacity, "lru_per_node": lru}
                    )
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "shard_bytes": shard_bytes,
        "shards": SHARDS,
        "epochs": epochs,
        "rows": rows,
        "mosaicml": mosaicml,
        "rounds": 1,
    }


# --- the report ------------------------------------------------------------------------------------


def _ours_ratio(row: dict[str, Any], epoch: int, field: str = "downloaded") -> float:
    dataset = row_dataset_bytes(row)
    if field == "downloaded":
        return sum(node["downloaded"][epoch - 1] for node in row["per_node"]) / dataset
    return sum(node[field][epoch - 1] for node in row["per_node"]) * row["shard_bytes"] / dataset


def row_dataset_bytes(row: dict[str, Any]) -> int:
    return int(row["shard_bytes"] * row["shards"])


def _with_shape(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {**row, "shard_bytes": result["shard_bytes"], "shards": result["shards"]} for row in result["rows"]
    ]


def _mosaic_ratio(result: dict[str, Any], nodes: int, fraction: float, epoch: int) -> float | None:
    for row in result["mosaicml"]:
        if row["nodes"] == nodes and row["fraction"] == fraction:
            return sum(node[epoch - 1] for node in row["lru_per_node"]) / result["shards"]
    return None


def _find(
    rows: list[dict[str, Any]], nodes: int, fraction: float, eviction: str, workers: int = 0
) -> dict[str, Any] | None:
    for row in rows:
        if (
            row["nodes"] == nodes
            and row["fraction"] == fraction
            and row["eviction"] == eviction
            and row.get("workers", 0) == workers
        ):
            return row
    return None


def _seconds(row: dict[str, Any]) -> float:
    """The slowest node's seconds over all epochs (NaN for a record from before they were kept)."""
    return max((sum(node["seconds"]) for node in row["per_node"] if "seconds" in node), default=float("nan"))


def render(result: dict[str, Any]) -> str:
    rows = _with_shape(result)
    epochs = result["epochs"]
    lines = [
        f"Egress after {epochs} epochs as a multiple of the dataset ({result['shards']} shards of "
        f"{result['shard_bytes']:,} B). Ours: measured (node statistics; the server's count is in the "
        "JSON record). Yardsticks on ours' own reads: ideal LRU and the optimum (Belady), same capacity. "
        "MosaicML: its shuffle and partition with an ideal LRU cache of the same capacity.",
        "",
        "| workers | nodes | cache (of a node's share) | ours, belady | ours, lru | ideal LRU | optimum "
        "| ours belady / optimum | ours belady / ideal LRU | MosaicML py1e, ideal LRU | seconds, slowest node |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in sorted(
        (r for r in rows if r["eviction"] == "belady"),
        key=lambda r: (r.get("workers", 0), r["nodes"], r["fraction"]),
    ):
        nodes, fraction, workers = row["nodes"], row["fraction"], row.get("workers", 0)
        lru_row = _find(rows, nodes, fraction, "lru", workers)
        ours = _ours_ratio(row, epochs)
        ideal = _ours_ratio(row, epochs, "lru")
        optimum = _ours_ratio(row, epochs, "optimum")
        mosaic = _mosaic_ratio(result, nodes, fraction, epochs)
        lru = "-" if lru_row is None else f"{_ours_ratio(lru_row, epochs):.2f}x"
        lines.append(
            f"| {workers} | {nodes} | {fraction:.0%} | {ours:.2f}x | {lru} | {ideal:.2f}x | {optimum:.2f}x | "
            f"{ours / optimum:.2f} | {ours / ideal:.2f} | {'-' if mosaic is None else f'{mosaic:.2f}x'} | "
            f"{_seconds(row):.1f} |"
        )
    lines += ["", "Egress after each epoch, caches that hold a node's share:", ""]
    lines += [
        "| nodes | "
        + " | ".join(f"epoch {e}" for e in range(1, epochs + 1))
        + " | MosaicML after epoch "
        + f"{epochs} |",
        "|---|" + "---|" * (epochs + 1),
    ]
    for row in sorted(
        (r for r in rows if r["fraction"] >= 1.0 and not r.get("workers")), key=lambda r: r["nodes"]
    ):
        mosaic = _mosaic_ratio(result, row["nodes"], 1.0, epochs)
        lines.append(
            f"| {row['nodes']} | "
            + " | ".join(f"{_ours_ratio(row, e):.2f}x" for e in range(1, epochs + 1))
            + f" | {'-' if mosaic is None else f'{mosaic:.2f}x'} |"
        )
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    rows = _with_shape(result)
    epochs = result["epochs"]
    checks = []
    for row in rows:
        if row["eviction"] != "belady":
            continue
        ours = _ours_ratio(row, epochs)
        workers = row.get("workers", 0)
        if row["fraction"] < 1.0:
            optimum = _ours_ratio(row, epochs, "optimum")
            checks.append(
                (
                    f"belady on {row['nodes']} nodes, {row['fraction']:.0%} of the share, {workers} workers: "
                    "<= 1.15x the optimum (issue 39)",
                    f"{ours / optimum:.2f}x",
                    ours <= 1.15 * optimum,
                )
            )
        if row["fraction"] >= 1.0:
            first = _ours_ratio(row, 1)
            checks.append(
                (
                    f"egress of {epochs} epochs on {row['nodes']} nodes, {workers} workers <= 1.05x one epoch's",
                    f"{ours / first:.2f}x",
                    ours <= 1.05 * first,
                )
            )
    return checks


def plot(result: dict[str, Any], path: Path) -> None:
    """Left: egress against epochs (caches that hold the share); right: egress after the last epoch
    against the cache fraction. Ours (belady, lru) and MosaicML's py1e with an ideal LRU cache."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _with_shape(result)
    epochs = result["epochs"]
    colors = {2: "C0", 4: "C1", 8: "C2"}
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    span = range(1, epochs + 1)
    for row in sorted(
        (r for r in rows if r["fraction"] >= 1.0 and not r.get("workers")), key=lambda r: r["nodes"]
    ):
        nodes = row["nodes"]
        left.plot(
            span,
            [_ours_ratio(row, e) for e in span],
            "-o",
            color=colors.get(nodes),
            label=f"ours, {nodes} nodes",
        )
        mosaic = [_mosaic_ratio(result, nodes, 1.0, e) for e in span]
        if None not in mosaic:
            left.plot(span, mosaic, ":x", color=colors.get(nodes), label=f"{MOSAICML}, {nodes} nodes")
        before = [nodes * (1 - (1 - 1 / nodes) ** e) for e in span]
        left.plot(
            span,
            before,
            "--",
            color=colors.get(nodes),
            alpha=0.4,
            label=f"ours before (N(1-(1-1/N)^E)), {nodes} nodes",
        )
    left.set_xlabel("epochs")
    left.set_ylabel("egress / dataset size")
    left.set_title("Caches that hold a node's share", fontsize=10)
    left.grid(alpha=0.3)
    left.legend(fontsize=7)
    for nodes in sorted({r["nodes"] for r in rows}):
        for eviction, style in (("belady", "-o"), ("lru", "--s")):
            points = sorted(
                (r["fraction"], _ours_ratio(r, epochs))
                for r in rows
                if r["nodes"] == nodes
                and not r.get("workers")
                and (r["eviction"] == eviction or r["fraction"] >= 1.0)
            )
            right.plot(
                [100 * x for x, _ in points],
                [y for _, y in points],
                style,
                color=colors.get(nodes),
                label=f"ours {eviction}, {nodes} nodes",
            )
        mosaic_points: list[tuple[float, float]] = sorted(
            (row["fraction"], ratio)
            for row in result["mosaicml"]
            if row["nodes"] == nodes
            and (ratio := _mosaic_ratio(result, nodes, row["fraction"], epochs)) is not None
        )
        if mosaic_points:
            right.plot(
                [100 * x for x, _ in mosaic_points],
                [y for _, y in mosaic_points],
                ":x",
                color=colors.get(nodes),
                label=f"{MOSAICML} (ideal LRU), {nodes} nodes",
            )
    right.set_xlabel("node cache (% of the node's share)")
    right.set_ylabel(f"egress / dataset size after {epochs} epochs")
    right.set_title(f"After {epochs} epochs, by cache size", fontsize=10)
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


__all__ = ["FIGURE", "TITLE", "measure", "plot", "render", "targets"]
