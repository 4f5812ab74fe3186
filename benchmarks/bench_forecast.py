"""The node forecast (Belady's future) at a million shards and a billion samples: CPU time per pass,
per process and per node, and peak memory.

Usage::

    python benchmarks/bench_forecast.py [--shards 1000000] [--per-shard 1000] [--layouts 1000x8 100x8 16x8]
        [--processes-per-node 16] [--code PATH] [--repeat N]

Each layout (nodes x ranks per node, device batch 4, 2 workers, shuffled with py1e, 64 canonical
nodes at most) runs in a fresh subprocess. It times ``NodeForecaster.forecast`` for the first pass
(which plans it and the next epoch) and for a later pass (one new epoch), in CPU seconds of one
process, with the node's sharing (``reading/shared_forecast.py``) off: what each process paid before.
With sharing on, one process of the node plans and the others load the file: it times that load too,
so a node of ``--processes-per-node`` processes pays one plan plus that many loads. ``--repeat N`` runs
each layout N times and reports the least of each figure: on a busy machine CPU seconds only grow.

``--code PATH`` imports ``stream_plugin`` from another checkout (a ``git worktree`` of an older
commit) for the figures before a change; sharing is skipped where that code has none.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any


def run_layout(shards: int, per_shard: int, nodes: int, ranks_per_node: int) -> dict[str, Any]:
    """Measure one layout in this process (the child)."""
    import numpy as np

    from stream_plugin.order.topology import Topology
    from stream_plugin.reading.cursor import IterationPlan
    from stream_plugin.reading.epochs import EpochPlanner, OrderSettings
    from stream_plugin.reading.node_forecast import NodeForecaster
    from stream_plugin.reading.shard_table import ShardTable

    table = ShardTable.from_counts([np.full(shards, per_shard, np.int64)])
    settings = OrderSettings(
        shuffle=True, shuffle_algo="py1e", shuffle_seed=9176, shuffle_block_size=None,
        batching_method="random", sampling_method="balanced", sampling_granularity=1,
    )
    planner = EpochPlanner(table, table.samples_per_stream, settings)
    device_batch = 4
    global_batch = nodes * ranks_per_node * device_batch
    canonical = min(nodes, 64)
    topology = Topology(nodes, ranks_per_node, 2, rank=0, worker=0)
    rows = -(-table.num_samples // global_batch)

    def forecast(forecaster: Any, epoch: int) -> float:
        plan = IterationPlan(epoch=epoch, start=0, epoch_batch_size=global_batch, num_canonical_nodes=canonical)
        started = time.process_time()
        result = forecaster.forecast(
            plan, topology, device_batch_size=device_batch, global_batch_size=global_batch,
            rows_per_epoch=rows, drop_last=False, batching_method="random",
        )
        assert result is not None
        return time.process_time() - started

    # The forecaster plans shard ids itself now; code from before took the table's locate.
    located: tuple[Any, ...] = () if hasattr(table, "shards_of") else (table.locate,)
    forecaster_class: Any = NodeForecaster  # called as the measured code's signature wants
    alone = forecaster_class(planner, *located, shards)
    first_pass = forecast(alone, 0)
    later_pass = forecast(alone, 1)
    figures: dict[str, Any] = {
        "nodes": nodes, "ranks_per_node": ranks_per_node, "node_reads_per_pass": table.num_samples // nodes,
        "first_pass_cpu_s": round(first_pass, 3), "later_pass_cpu_s": round(later_pass, 3),
    }
    try:
        shared_forecast: Any = importlib.import_module("stream_plugin.reading.shared_forecast")
    except ImportError:  # code from before the node's sharing
        shared_forecast = None
    if shared_forecast is not None:
        SharedSpans = shared_forecast.SharedSpans  # noqa: N806
        with tempfile.TemporaryDirectory() as local:
            identity = SharedSpans.identity_of(table.samples_per_shard, table.samples_per_stream, settings)
            planning = forecaster_class(planner, *located, shards, shared=SharedSpans(local, identity))
            forecast(planning, 0)  # this process plans epochs 0 and 1 and writes them
            loads = [  # another process: loads both; the least of 3 (a few ms, which a busy machine blurs)
                forecast(forecaster_class(planner, *located, shards, shared=SharedSpans(local, identity)), 0)
                for _ in range(3)
            ]
            figures["shared_load_cpu_s"] = round(min(loads), 3)
    figures["peak_rss_mib"] = round(_peak_rss_mib(), 1)
    return figures


def _peak_rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=1_000_000)
    parser.add_argument("--per-shard", type=int, default=1000)
    parser.add_argument("--layouts", nargs="+", default=["1000x8", "100x8", "16x8"])
    parser.add_argument("--processes-per-node", type=int, default=16, help="ranks x workers of a node")
    parser.add_argument("--code", help="import stream_plugin from this checkout instead")
    parser.add_argument("--repeat", type=int, default=1, help="runs per layout; each figure is the least of them")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_layout(args.shards, args.per_shard, *args.child)))
        return
    env = dict(os.environ)
    if args.code:
        env["PYTHONPATH"] = os.path.abspath(args.code)
    print(f"{args.shards:,} shards x {args.per_shard:,} samples; CPU s of one process; load average {os.getloadavg()[0]:.1f}")
    print("| nodes x ranks | node reads / pass | first pass (2 epochs) | later pass | shared: load | node per pass, shared | peak MiB |")
    print("|---|---|---|---|---|---|---|")
    for layout in args.layouts:
        nodes, ranks = (int(part) for part in layout.split("x"))
        runs = [
            json.loads(
                subprocess.run(
                    [sys.executable, __file__, "--shards", str(args.shards), "--per-shard", str(args.per_shard),
                     "--child", str(nodes), str(ranks)],
                    env=env, check=True, capture_output=True, text=True,
                ).stdout.strip().splitlines()[-1]
            )
            for _ in range(args.repeat)
        ]
        row = {key: min(run[key] for run in runs) for key in runs[0]}
        load = row.get("shared_load_cpu_s")
        node = "n/a" if load is None else f"{row['later_pass_cpu_s'] + (args.processes_per_node - 1) * load / 2:.2f}"
        print(
            f"| {nodes} x {ranks} | {row['node_reads_per_pass']:,} | {row['first_pass_cpu_s']:.2f} | {row['later_pass_cpu_s']:.2f} "
            f"| {'n/a' if load is None else f'{load / 2:.3f} per pass'} | {node} | {row['peak_rss_mib']:.0f} |"
        )


if __name__ == "__main__":
    main()
