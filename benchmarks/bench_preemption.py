"""The cost of agreeing on a preemption at every step: ``agree_on_signal`` over gloo, per call.

``PreemptionCheckpoint`` (Lightning and Composer) runs one ``agree_on_signal`` per optimizer step under
DDP: a MAX all-reduce of one int64. This starts N real processes on this machine (gloo over loopback,
CPU), times ``--calls`` agreements after a warm-up on every rank, and prints the median and the 95th
percentile of one call, as rank 0 sees it. With ``--step-ms`` each call follows that much simulated
work (a sleep), which shows the cost next to a step rather than back to back.

    .venv/bin/python -m benchmarks.bench_preemption --processes 2 4 --calls 2000

Not part of ``./benchmarks/run``: its section in RESULTS.md is written by hand.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch.multiprocessing as mp

WARM_UP = 50


def _rank(rank: int, world: int, store: str, calls: int, step_s: float, results: mp.SimpleQueue) -> None:
    import torch.distributed as dist

    from stream_plugin.preemption import agree_on_signal

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    for _ in range(WARM_UP):
        agree_on_signal(0)
    durations = []
    for _ in range(calls):
        if step_s:
            time.sleep(step_s)
        started = time.perf_counter()
        agree_on_signal(0)
        durations.append(time.perf_counter() - started)
    dist.barrier()
    if rank == 0:
        results.put(durations)
    dist.destroy_process_group()


def measure(world: int, calls: int, step_s: float) -> list[float]:
    """Seconds per ``agree_on_signal`` call on rank 0, one entry per call."""
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as folder:
        store = str(Path(folder) / "store")
        mp.start_processes(
            _rank, args=(world, store, calls, step_s, results), nprocs=world, start_method="spawn"
        )
    durations: list[float] = results.get()
    return durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--step-ms", type=float, default=0.0, help="simulated work before each call")
    options = parser.parse_args()
    for world in options.processes:
        durations = sorted(measure(world, options.calls, options.step_ms / 1000))
        median = statistics.median(durations)
        p95 = durations[int(0.95 * (len(durations) - 1))]
        print(
            f"{world} processes, {options.calls} calls, {options.step_ms:g} ms of work before each: "
            f"median {median * 1e6:.0f} us, p95 {p95 * 1e6:.0f} us per agreement"
        )


if __name__ == "__main__":
    main()
