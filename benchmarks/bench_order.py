"""Time and peak memory of ``plan_epoch`` (one epoch's global order) for large single-stream datasets.

Usage::

    python benchmarks/bench_order.py --sizes 1M 10M 100M [--algo block] [--nodes 8] [--batch 256]

Each size runs in a fresh subprocess so its peak RSS (``resource.getrusage``) is its own. The
reported peak includes the input (the sampler's int64 chosen ids) and the (T, G) int64 output.

As a figure of the harness (``./benchmarks/run order``) it also times MosaicML Streaming's epoch
arrangement for the same shape (its ``get_partitions`` + ``get_shuffle`` + the two gathers its
``generate_work_random_batching`` does), in the peers environment.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

_SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9}


def parse_size(text: str) -> int:
    """``'10M'`` -> 10_000_000."""
    if text[-1] in _SUFFIX:
        return int(float(text[:-1]) * _SUFFIX[text[-1]])
    return int(text)


def peak_rss_mib() -> float:
    """This process's peak RSS in MiB: VmHWM, which exec resets (``ru_maxrss`` of a child process
    starts at its parent's RSS at fork time, so it overstates a child started from a big parent)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux -> MiB


def run_one(num_samples: int, algo: str, nodes: int, batch: int, shards: int) -> dict[str, float]:
    """Plan one epoch in this process and measure it."""
    import numpy as np

    from stream_plugin.order.layout import DatasetShape
    from stream_plugin.order.plan import OrderConfig, plan_epoch

    rss_after_imports = peak_rss_mib()
    per_shard = -(-num_samples // shards)
    sizes = np.full(shards, per_shard, dtype=np.int64)
    sizes[-1] = num_samples - per_shard * (shards - 1)
    shape = DatasetShape(sizes, np.zeros(shards, dtype=np.int64))
    chosen = [np.arange(num_samples, dtype=np.int64)]  # what the sampler hands over: sorted int64 ids
    config = OrderConfig(
        shuffle=algo != "none",
        shuffle_algo=algo,
        num_canonical_nodes=nodes,
        global_batch_size=batch,
    )
    rss_before = peak_rss_mib()
    cpu_start = time.process_time()
    start = time.perf_counter()
    order = plan_epoch(shape, chosen, config, epoch=1)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    peak = peak_rss_mib()
    assert order.num_samples == num_samples
    figures = _planning_figures(num_samples, seconds, peak, rss_before, rss_after_imports)
    figures["cpu_seconds"] = cpu_seconds
    return figures


def run_rank(
    num_samples: int,
    algo: str,
    nodes: int,
    batch: int,
    shards: int,
    ranks: int = 8,
    workers: int = 0,
    resume: float = 0.0,
) -> dict[str, float]:
    """Plan rank 0 (worker 0)'s share of one epoch by chunked planning, in this process, and measure it.

    The input is ``AllSamples`` (every sample once), as the dataset hands it over: no id array.
    ``resume`` is the fraction of the epoch already consumed (rounded down to whole global batches).
    """
    import numpy as np

    from stream_plugin.order.chunked import plan_rank_batches
    from stream_plugin.order.layout import AllSamples, DatasetShape
    from stream_plugin.order.plan import OrderConfig
    from stream_plugin.order.topology import Topology

    rss_after_imports = peak_rss_mib()
    per_shard = -(-num_samples // shards)
    sizes = np.full(shards, per_shard, dtype=np.int64)
    sizes[-1] = num_samples - per_shard * (shards - 1)
    shape = DatasetShape(sizes, np.zeros(shards, dtype=np.int64))
    config = OrderConfig(
        shuffle=algo != "none", shuffle_algo=algo, num_canonical_nodes=nodes, global_batch_size=batch
    )
    topology = Topology(num_nodes=1, ranks_per_node=ranks, workers_per_rank=workers)
    consumed = int(num_samples * resume) // batch * batch
    rss_before = peak_rss_mib()
    cpu_start = time.process_time()
    start = time.perf_counter()
    batches = plan_rank_batches(
        shape,
        [AllSamples(num_samples)],
        config,
        1,
        consumed=consumed,
        global_batch_size=batch,
        topology=topology,
    )
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    peak = peak_rss_mib()
    expected = (num_samples - consumed) // batch // max(workers, 1)
    assert abs(len(batches.full) - expected) <= 1, (len(batches.full), expected)
    figures = _planning_figures(num_samples, seconds, peak, rss_before, rss_after_imports)
    figures["cpu_seconds"] = cpu_seconds  # the process's own CPU time: steadier than wall on a shared machine
    return figures


def _planning_figures(
    num_samples: int, seconds: float, peak: float, rss_before: float, rss_after_imports: float
) -> dict[str, float]:
    return {
        "samples": num_samples,
        "seconds": seconds,
        "peak_rss_mib": peak,
        "rss_before_mib": rss_before,
        "rss_after_imports_mib": rss_after_imports,
    }


def mosaicml_run_one(num_samples: int, nodes: int, batch: int, shards: int) -> dict[str, float]:
    """MosaicML Streaming 0.13's epoch arrangement (``py1e`` shuffle, ``relaxed`` partition), measured alike."""
    import numpy as np
    from streaming.base.partition import get_partitions
    from streaming.base.shuffle import get_shuffle

    rss_after_imports = peak_rss_mib()
    per_shard = -(-num_samples // shards)
    sizes = np.full(shards, per_shard, dtype=np.int64)
    sizes[-1] = num_samples - per_shard * (shards - 1)
    small_per_big = np.arange(num_samples, dtype=np.int64)  # what resample_streams gives for one stream
    block_size = max(4_000_000 // nodes, 1 << 18)  # its default shuffle_block_size
    rss_before = peak_rss_mib()
    start = time.perf_counter()
    big_ids = get_partitions("relaxed", num_samples, nodes, 1, 1, 1, batch)
    shuffle = get_shuffle("py1e", sizes, nodes, 9176, 1, block_size)
    big_ids = np.where(big_ids != -1, shuffle[big_ids], -1)
    work = np.where(big_ids != -1, small_per_big[big_ids], -1)
    seconds = time.perf_counter() - start
    peak = peak_rss_mib()
    assert (work != -1).sum() == num_samples
    return _planning_figures(num_samples, seconds, peak, rss_before, rss_after_imports)


# --------------------------------------------------------------------------------------------------
# The harness figure.

FIGURE = "order"
TITLE = "Epoch-order build time and memory"
DESCRIPTION = (
    "`plan_epoch` (one epoch's global order) for one stream of 1M / 10M / 100M samples, each run in a "
    "fresh process so its peak RSS is its own, next to MosaicML Streaming 0.13's arrangement of the same "
    "shape (its `get_partitions` + `get_shuffle('py1e')` + the two gathers of "
    "`generate_work_random_batching`)."
)
FIGURE_SIZES = ("1M", "10M", "100M")
SMOKE_SIZES = ("100k",)
FIGURE_NODES = 8
FIGURE_BATCH = 256
FIGURE_SHARDS = 10_000
OURS_ALGOS = ("block", "permute")


def measure(options: Any) -> dict[str, Any]:
    from benchmarks.common import run_child

    sizes = SMOKE_SIZES if options.smoke else FIGURE_SIZES
    runners: list[tuple[str, str, dict[str, Any]]] = [
        ("stream_plugin", f"shuffle_algo={algo}", {"target": "benchmarks.bench_order:run_one", "algo": algo})
        for algo in (OURS_ALGOS[:1] if options.smoke else OURS_ALGOS)
    ]
    if not options.smoke:
        runners.append(("mosaicml-streaming", "py1e", {"target": "benchmarks.bench_order:mosaicml_run_one"}))
    runs: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    for _ in range(options.rounds):
        for size in sizes:
            for library, algo, call in runners:
                arguments = {k: v for k, v in call.items() if k != "target"}
                result = run_child(
                    call["target"],
                    num_samples=parse_size(size),
                    nodes=FIGURE_NODES,
                    batch=FIGURE_BATCH,
                    shards=FIGURE_SHARDS,
                    **arguments,
                )
                runs.setdefault((size, library, algo), []).append(result)
    rows = [{"size": size, "library": lib, "algo": algo, "runs": r} for (size, lib, algo), r in runs.items()]
    return {"rows": rows, "nodes": FIGURE_NODES, "batch": FIGURE_BATCH, "shards": FIGURE_SHARDS}


def _planning_mib(run: dict[str, float]) -> float:
    """Peak RSS over the process after its imports: the input ids plus everything planning allocates."""
    return run["peak_rss_mib"] - run.get("rss_after_imports_mib", run["rss_before_mib"])


def render(result: dict[str, Any]) -> str:
    from benchmarks.common import median_of, ratio, spread_of

    ours_seconds = {
        row["size"]: median_of([run["seconds"] for run in row["runs"]])
        for row in result["rows"]
        if row["library"] == "stream_plugin" and row["algo"] == f"shuffle_algo={OURS_ALGOS[0]}"
    }
    lines = [
        f"One epoch's global order, {result['shards']:,} shards, num_canonical_nodes={result['nodes']}, "
        f'global batch {result["batch"]}, in a fresh process per run. "Planning MiB" is the peak RSS '
        "minus the RSS after imports: the input sample ids (int64, as the sampler hands them over) plus "
        'everything planning allocates. "After imports" is large because `import stream_plugin.order` '
        "imports torch through the package's `__init__`. Ours / this compares with our default "
        f"(`{OURS_ALGOS[0]}`, what `py1e` maps to).",
        "",
        "| samples | library | shuffle | seconds (median) | spread | planning MiB | peak RSS MiB | after imports "
        "MiB | ours / this (time) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        runs = row["runs"]
        seconds = [run["seconds"] for run in runs]
        lines.append(
            f"| {row['size']} | {row['library']} | {row['algo']} | {median_of(seconds):.2f} | "
            f"{spread_of(seconds, 2)} | {median_of([_planning_mib(run) for run in runs]):,.0f} | "
            f"{median_of([run['peak_rss_mib'] for run in runs]):,.0f} | "
            f"{median_of([run.get('rss_after_imports_mib', 0.0) for run in runs]):,.0f} | "
            f"{ratio(median_of(seconds), ours_seconds[row['size']])} |"
        )
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    from benchmarks.common import median_of

    checks = []
    for row in result["rows"]:
        if row["library"] == "stream_plugin" and row["size"] == "100M":
            seconds = median_of([run["seconds"] for run in row["runs"]])
            planning = median_of([_planning_mib(run) for run in row["runs"]])
            what = f"plan 100M samples ({row['algo']}): < 5 s and < 2 GB (planning memory)"
            met = seconds < 5 and planning * 2**20 < 2e9
            checks.append((what, f"{seconds:.2f} s, {planning:,.0f} MiB", met))
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["1M", "10M", "100M"])
    parser.add_argument("--algo", default="block", help="shuffle_algo (none, permute, block, intra_shard)")
    parser.add_argument("--nodes", type=int, default=8, help="num_canonical_nodes")
    parser.add_argument("--batch", type=int, default=256, help="global batch size")
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument(
        "--rank",
        action="store_true",
        help="chunked planning of rank 0's share (of --ranks ranks, --workers workers) instead of plan_epoch",
    )
    parser.add_argument("--ranks", type=int, default=8, help="data-parallel ranks (with --rank)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers per rank (with --rank)")
    parser.add_argument(
        "--resume", type=float, default=0.0, help="fraction of the epoch consumed (with --rank)"
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run a single size in this process
    args = parser.parse_args()
    if args.one:
        size = parse_size(args.one)
        if args.rank:
            result = run_rank(
                size, args.algo, args.nodes, args.batch, args.shards, args.ranks, args.workers, args.resume
            )
        else:
            result = run_one(size, args.algo, args.nodes, args.batch, args.shards)
        print(json.dumps(result))
        return
    what = (
        f"chunked, rank 0 of {args.ranks}, {args.workers} workers, resume at {args.resume:.0%}"
        if args.rank
        else "plan_epoch"
    )
    print(f"{what}, shuffle_algo={args.algo}, C={args.nodes}, G={args.batch}, {args.shards} shards")
    print(f"{'samples':>12} {'seconds':>8} {'CPU s':>6} {'peak RSS MiB':>13} {'RSS before':>11}")
    for size in args.sizes:
        command = [sys.executable, __file__, "--one", size, "--algo", args.algo]
        command += ["--nodes", str(args.nodes), "--batch", str(args.batch), "--shards", str(args.shards)]
        if args.rank:
            command += ["--rank", "--ranks", str(args.ranks), "--workers", str(args.workers)]
            command += ["--resume", str(args.resume)]
        result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        print(
            f"{result['samples']:>12,} {result['seconds']:>8.2f} {result.get('cpu_seconds', float('nan')):>6.2f} "
            f"{result['peak_rss_mib']:>13.0f} "
            f"{result['rss_before_mib']:>11.0f}"
        )


if __name__ == "__main__":
    main()
