"""The cost of agreeing on a preemption at every step: ``agree_on_signal`` over gloo, per call.

``PreemptionCheckpoint`` (Lightning and Composer) runs one ``agree_on_signal`` per optimizer step under
DDP: a MAX all-reduce of one int64. This starts N real processes on this machine (gloo over loopback,
CPU), times ``--calls`` agreements after a warm-up on every rank, and prints the median and the 95th
percentile of one call, as rank 0 sees it. With ``--step-ms`` each call follows that much simulated
work (a sleep), which shows the cost next to a step rather than back to back. With ``--ddp-step`` each
call follows a real DDP training step of a small MLP (1M parameters, batch 64: forward, backward with
the gradient all-reduce, SGD), and every other block of 25 iterations leaves the agreement out: the
median time per iteration of the blocks with it, against the blocks without, is what it adds to a step.

    .venv/bin/python -m benchmarks.bench_preemption --processes 2 4 --calls 2000
    .venv/bin/python -m benchmarks.bench_preemption --processes 2 4 --calls 300 --ddp-step

Not part of ``./benchmarks/run``: its section in RESULTS.md is written by hand.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch.multiprocessing as mp

WARM_UP = 50
BLOCK = 25  # iterations per block, with --ddp-step


def _ddp_step() -> Callable[[], None]:
    """One training step of a 1M-parameter MLP under DDP (gloo): forward, backward, SGD."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(64, 512)

    def step() -> None:
        optimizer.zero_grad()
        model(inputs).square().mean().backward()
        optimizer.step()

    return step


def _rank(
    rank: int, world: int, store: str, calls: int, step_s: float, ddp: bool, results: mp.SimpleQueue
) -> None:
    import torch.distributed as dist

    from stream_plugin.preemption import agree_on_signal

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    step = _ddp_step() if ddp else None
    for _ in range(WARM_UP):
        if step is not None:
            step()
        agree_on_signal(0)
    steps, agreements = [], []
    block_started = time.perf_counter()
    for call in range(calls):
        if step_s:
            time.sleep(step_s)
        # With a DDP step, blocks of BLOCK iterations alternate without and with the agreement: the
        # time per iteration of the blocks with it, against those without, is what it adds to a step
        # (a wait for the slowest rank included, which the next gradient all-reduce would otherwise pay).
        with_agreement = step is None or (call // BLOCK) % 2 == 1
        if step is not None:
            step()
        if with_agreement:
            started = time.perf_counter()
            agree_on_signal(0)
            agreements.append(time.perf_counter() - started)
        if step is not None and call % BLOCK == BLOCK - 1:
            per_iteration = (time.perf_counter() - block_started) / BLOCK
            steps.append(per_iteration if with_agreement else -per_iteration)
            block_started = time.perf_counter()
    dist.barrier()
    if rank == 0:
        results.put((steps, agreements))
    dist.destroy_process_group()


def measure(world: int, calls: int, step_s: float, ddp: bool) -> tuple[list[float], list[float]]:
    """Seconds per DDP step (0 without ``ddp``) and per ``agree_on_signal`` call on rank 0, per call."""
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as folder:
        store = str(Path(folder) / "store")
        mp.start_processes(
            _rank, args=(world, store, calls, step_s, ddp, results), nprocs=world, start_method="spawn"
        )
    measured: tuple[list[float], list[float]] = results.get()
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--step-ms", type=float, default=0.0, help="simulated work before each call")
    parser.add_argument("--ddp-step", action="store_true", help="a real DDP step before each call")
    options = parser.parse_args()
    for world in options.processes:
        steps, agreements = measure(world, options.calls, options.step_ms / 1000, options.ddp_step)
        agreements.sort()
        median = statistics.median(agreements)
        p95 = agreements[int(0.95 * (len(agreements) - 1))]
        work = "a DDP step" if options.ddp_step else f"{options.step_ms:g} ms of sleep"
        line = (
            f"{world} processes, {options.calls} calls, {work} before each: "
            f"median {median * 1e6:.0f} us, p95 {p95 * 1e6:.0f} us per agreement"
        )
        if options.ddp_step:
            plain = statistics.median([-seconds for seconds in steps if seconds < 0])
            agreed = statistics.median([seconds for seconds in steps if seconds > 0])
            line += (
                f"; median iteration {plain * 1e3:.1f} ms without, {agreed * 1e3:.1f} ms with the "
                f"agreement ({(agreed - plain) / plain:+.1%})"
            )
        print(line)


if __name__ == "__main__":
    main()
