"""Simulation (issue 29): MosaicML's own simulator example side by side, and a billion-sample epoch.

**Side by side.** MosaicML Streaming's simulator ships one worked example, `simulation/interfaces/sim_script.py`:
a C4-like dataset of 20,850 shards of 4,093 samples (67,092,639 bytes raw, 15,000,000 compressed), 2
nodes x 8 devices x 8 workers, device batch 16, `predownload=32`, no cache limit, `py1e` with
`num_canonical_nodes=2`, `shuffle_block_size=16,000,000`, seed 17, 0.0175 s per sample on a device, 10
MB/s into each node, 1,000 batches. Theirs runs its core (`simulation.core.main.simulate`, the function
its CLI and web UI call, without Streamlit) in the peers environment; ours runs `stream_plugin.simulate`
on the same shape three times: with MosaicML's assumptions (no request latency, no rate limit, instant
decompression, no per-sample read time), the same with half the shuffle block (our `py1e` is a block
shuffle, not MosaicML's sample order), and with the costs they leave out. Both again with a 10 Gbit/s
link. Each run is a fresh process, so its wall time and peak RSS are its own.

**Scale.** One epoch of 1,000,000 shards x 1,000 samples (a billion samples) on 64 nodes x 8 devices,
device batch 32, shuffled (`py1e`): wall time and peak RSS of `simulate` in a fresh process. Target
(issue 29): under 60 s and under 4 GB.

Usage::

    ./benchmarks/run simulate                  # both parts, stored in benchmarks/results/simulate.json
    python -m benchmarks.bench_simulate [--smoke] [--part side-by-side|scale|tune]   # print the tables

MosaicML's simulator core imports `sortedcollections` (its `simulator` extra); where that is missing its
row says so instead of failing the other figures.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any

from benchmarks.bench_order import peak_rss_mib
from benchmarks.common import PeakMemory, machine_lines, markdown_table, run_child

if TYPE_CHECKING:
    from stream_plugin.simulate import Hardware, Workload

FIGURE = "simulate"
TITLE = "Simulation: MosaicML's example side by side, and a billion-sample epoch (issue 29)"
DESCRIPTION = (
    "MosaicML Streaming 0.13's simulator core (`simulation.core.main.simulate`, what its CLI and web UI "
    "call; run without Streamlit in the peers environment) and `stream_plugin.simulate` on the example "
    "MosaicML ships (`simulation/interfaces/sim_script.py`), each in a fresh process. Ours runs three "
    "times: with MosaicML's assumptions (no request latency, no rate limit, instant decompression, no "
    "per-sample read time), the same with half the shuffle block (see the note on the order below), "
    "and with the costs MosaicML's model leaves out. Then one shuffled epoch of a billion samples on "
    "64 nodes x 8 devices, against the target of issue 29 (under 60 s and 4 GB)."
)

# MosaicML's sim_script.py, verbatim.
C4_LIKE: dict[str, Any] = {
    "shards": 20_850,
    "samples_per_shard": 4_093,
    "raw_bytes": 67_092_639,
    "zip_bytes": 15_000_000,
    "steps": 1_000,
    "device_batch": 16,
    "workers": 8,
    "canonical_nodes": 2,
    "predownload": 32,
    "shuffle_block_size": 16_000_000,
    "seed": 17,
    "nodes": 2,
    "devices": 8,
    "time_per_sample": 0.0175,
    "bandwidth": 10_000_000,
}
FAST_LINK = 1.25e9  # 10 Gbit/s into each node: where the link no longer hides what the example leaves out
SMOKE_C4_LIKE = {
    **C4_LIKE,
    "shards": 200,
    "samples_per_shard": 409,
    "steps": 50,
    "shuffle_block_size": 16_000,
}
# What MosaicML's model leaves out, for ours' second row: time to the first byte of each request,
# decompression of each shard by its download thread, and a worker's read of each sample.
LEFT_OUT = {"latency": 0.03, "decompress_rate": 300e6, "sample_time": 1e-4}

SCALE: dict[str, Any] = {
    "shards": 1_000_000,
    "samples_per_shard": 1_000,
    "nodes": 64,
    "devices": 8,
    "batch": 32,
}
SMOKE_SCALE = {**SCALE, "shards": 10_000, "samples_per_shard": 100, "nodes": 4}
SCALE_SHARD_BYTES = 64 << 20
SCALE_TARGET_SECONDS, SCALE_TARGET_MIB = 60.0, 4096.0

THEIRS = "mosaicml-streaming simulator"
OURS = "stream_plugin (MosaicML's assumptions)"
OURS_HALF_BLOCK = "stream_plugin (MosaicML's assumptions, half the shuffle block)"
OURS_LEFT_OUT = "stream_plugin (+ latency, decompression, reads)"


# --------------------------------------------------------------------------------------------------
# The runs (each in its own process).


def mosaicml_example(shape: dict[str, Any]) -> dict[str, Any]:
    """MosaicML's simulator on ``shape``, as its ``sim_script.py`` calls it; the same figures as ours."""
    try:
        import sortedcollections  # noqa: F401  (its simulator extra; the core imports it)
    except ImportError as error:
        return {
            "skipped": f"{error}: install mosaicml-streaming[simulator] (or sortedcollections) in .venv-peers"
        }
    import numpy as np
    from simulation.core.create_index import create_stream_index
    from simulation.core.main import simulate
    from simulation.core.sim_dataset import SimulationDataset
    from simulation.core.sim_time import TimeUnit, ensure_time
    from streaming.base import Stream

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)  # create_stream_index writes its index.json under the working directory
        index = create_stream_index(
            shape["shards"], shape["samples_per_shard"], shape["raw_bytes"], shape["zip_bytes"]
        )
        dataset = SimulationDataset(
            nodes=shape["nodes"],
            devices=shape["devices"],
            workers=shape["workers"],
            streams=[Stream(local=os.path.dirname(index))],
            predownload=shape["predownload"],
            cache_limit=None,
            num_canonical_nodes=shape["canonical_nodes"],
            batch_size=shape["device_batch"],
            shuffle=True,
            shuffle_algo="py1e",
            shuffle_seed=shape["seed"],
            shuffle_block_size=shape["shuffle_block_size"],
        )
        duration = ensure_time(f"{shape['steps']}ba", TimeUnit.EPOCH)
        step_times, step_downloads, startup, min_cache = next(
            simulate(dataset, shape["time_per_sample"], int(shape["bandwidth"]), duration)
        )
    wall = time.perf_counter() - start
    compute = shape["device_batch"] * shape["time_per_sample"]  # its step time without waiting
    waits = np.maximum(step_times - compute, 0.0)
    egress = int(step_downloads.sum())
    return {
        "steps": len(step_times),
        "total_time_s": float(step_times.sum()),
        "time_to_first_batch_s": float(waits[0]),
        "reported_startup_s": float(startup),  # adds its own wall time of building the dataset
        "stalled_steps": int(np.count_nonzero(step_times > compute)),  # its get_simulation_stats' count
        "total_wait_s": float(waits.sum()),
        "egress_bytes": egress,
        "downloads": egress // shape["zip_bytes"],  # every shard is zip_bytes
        "min_cache_limit_bytes": int(min_cache),
        "wall_s": wall,
        "peak_rss_mib": peak_rss_mib(),
    }


def ours_example(shape: dict[str, Any], left_out: dict[str, float]) -> dict[str, Any]:
    """``stream_plugin.simulate`` on ``shape``; ``left_out`` adds latency, decompression and reads."""
    from stream_plugin.simulate import simulate

    start = time.perf_counter()
    simulation = simulate(*example_inputs(shape, left_out))
    wall = time.perf_counter() - start
    return {
        "steps": simulation.num_steps,
        "total_time_s": simulation.total_time,
        "time_to_first_batch_s": simulation.time_to_first_batch,
        "stalled_steps": simulation.stalled_steps,
        "total_wait_s": simulation.total_wait,
        "egress_bytes": simulation.egress_bytes,
        "downloads": int(simulation.node_downloads.sum()),
        "min_cache_limit_bytes": simulation.download_once_cache_limit,
        "wall_s": wall,
        "peak_rss_mib": peak_rss_mib(),
    }


def example_inputs(shape: dict[str, Any], left_out: dict[str, float]) -> tuple[Workload, Hardware]:
    """Our workload and hardware for a ``C4_LIKE``-style shape."""
    from stream_plugin.reading.config import DatasetConfig
    from stream_plugin.simulate import Hardware, Workload

    config = DatasetConfig(
        batch_size=shape["device_batch"],
        predownload=shape["predownload"],
        num_canonical_nodes=shape["canonical_nodes"],
        shuffle=True,
        shuffle_algo="py1e",
        shuffle_seed=shape["seed"],
        shuffle_block_size=shape["shuffle_block_size"],
    )
    workload = Workload.synthetic(
        shards=shape["shards"],
        samples_per_shard=shape["samples_per_shard"],
        raw_bytes_per_shard=shape["raw_bytes"],
        stored_bytes_per_shard=shape["zip_bytes"],
        config=config,
    )
    hardware = Hardware(
        nodes=shape["nodes"],
        devices_per_node=shape["devices"],
        workers=shape["workers"],
        bandwidth=float(shape["bandwidth"]),
        step_time_per_sample=shape["time_per_sample"],
        max_steps=shape["steps"],
        **left_out,
    )
    return workload, hardware


def tune_example(shape: dict[str, Any], price_per_gb: float, target_throughput: float | None) -> str:
    """``tune`` on the example: the best setting and the runners-up, as a Markdown table."""
    from stream_plugin.simulate.tune import tune

    start = time.perf_counter()
    result = tune(*example_inputs(shape, {}), price_per_gb=price_per_gb, target_throughput=target_throughput)
    seconds = time.perf_counter() - start
    keys = ("predownload", "num_workers", "cache_limit", "shuffle_block_size", "qualifies", "stalled_steps")
    keys += ("total_wait_s", "total_time_s", "egress_bytes", "cost")
    rows = [
        ["best" if index == 0 and result.best is not None else "runner-up"]
        + [_tune_cell(key, row[key]) for key in keys]
        for index, row in enumerate(
            [
                *([result.summary()["best"]] if result.best is not None else []),
                *result.summary(5)["runners_up"],
            ]
        )
    ]
    return (
        f"{len(result.candidates)} settings simulated in {seconds:.0f} s ({len(result.refused)} refused), "
        f"${price_per_gb}/GB, target {target_throughput or 'no stall after the first step'}"
        f"{'' if result.best is not None else ': no setting qualifies; the least waiting first'}:\n\n"
        + markdown_table(["", *keys], rows)
    )


def _tune_cell(key: str, value: Any) -> str:
    if value is None:
        return "none" if key == "cache_limit" else "default"
    if key in ("cache_limit", "egress_bytes"):
        return f"{value / 1e9:,.1f} GB"
    if key == "cost":
        return f"${value:,.2f}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def ours_scale(shape: dict[str, Any]) -> dict[str, Any]:
    """One shuffled epoch of ``shape`` through ``simulate``: wall time from building the workload to the
    result, and the process's peak RSS (VmHWM)."""
    from stream_plugin.reading.config import DatasetConfig
    from stream_plugin.simulate import Hardware, Workload, simulate

    rss_after_imports = peak_rss_mib()
    start = time.perf_counter()
    cpu_start = time.process_time()
    workload = Workload.synthetic(
        shards=shape["shards"],
        samples_per_shard=shape["samples_per_shard"],
        raw_bytes_per_shard=SCALE_SHARD_BYTES,
        config=DatasetConfig(batch_size=shape["batch"], shuffle=True),
    )
    hardware = Hardware(nodes=shape["nodes"], devices_per_node=shape["devices"], step_time=0.5)
    with PeakMemory() as memory:  # the engine may plan the nodes' reads in helper processes
        simulation = simulate(workload, hardware)
    helpers = memory.workers_mib()
    return {
        "samples": workload.num_samples,
        "steps": simulation.num_steps,
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - cpu_start,
        "main_peak_rss_mib": peak_rss_mib(),
        "helper_peak_rss_mib": helpers,
        # An upper bound of the job's memory: each process's own peak, added as if all fell together.
        "peak_rss_mib": peak_rss_mib() + sum(helpers),
        "rss_after_imports_mib": rss_after_imports,
        "stalled_steps": simulation.stalled_steps,
        "egress_bytes": simulation.egress_bytes,
    }


# --------------------------------------------------------------------------------------------------
# The harness figure.


def measure(options: Any) -> dict[str, Any]:
    return {
        **measure_side_by_side(options.smoke),
        **measure_scale(options.smoke, options.rounds),
        "rounds": options.rounds,
    }


def measure_side_by_side(smoke: bool) -> dict[str, Any]:
    """Counts of one deterministic run each (the simulations have no noise; wall time is for scale), on
    MosaicML's example and on the same example with a 10 Gbit/s link."""
    example = SMOKE_C4_LIKE if smoke else C4_LIKE
    cases = []
    for bandwidth in (example["bandwidth"], FAST_LINK):
        shape = {**example, "bandwidth": bandwidth}
        half_block = {**shape, "shuffle_block_size": shape["shuffle_block_size"] // 2}
        runs = {} if smoke else {THEIRS: run_child("benchmarks.bench_simulate:mosaicml_example", shape=shape)}
        runs[OURS] = run_child("benchmarks.bench_simulate:ours_example", shape=shape, left_out={})
        runs[OURS_HALF_BLOCK] = run_child(
            "benchmarks.bench_simulate:ours_example", shape=half_block, left_out={}
        )
        runs[OURS_LEFT_OUT] = run_child(
            "benchmarks.bench_simulate:ours_example", shape=shape, left_out=LEFT_OUT
        )
        cases.append({"bandwidth": bandwidth, "runs": runs})
    return {"example": example, "left_out": LEFT_OUT, "cases": cases}


def measure_scale(smoke: bool, rounds: int) -> dict[str, Any]:
    shape = SMOKE_SCALE if smoke else SCALE
    runs = [run_child("benchmarks.bench_simulate:ours_scale", shape=shape) for _ in range(rounds)]
    return {"scale": shape, "scale_runs": runs}


def _cell(run: dict[str, Any], key: str) -> str:
    value = run.get(key)
    if value is None:
        return "-"
    if key.endswith("_bytes"):
        return f"{value / 1e9:,.1f} GB"
    if key.endswith("_mib"):
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"
    return f"{value:,}"


SIDE_BY_SIDE_COLUMNS = (
    ("steps", "steps"),
    ("total_time_s", "simulated time s"),
    ("time_to_first_batch_s", "time to first batch s"),
    ("stalled_steps", "stalled steps"),
    ("total_wait_s", "wait s"),
    ("downloads", "shard downloads"),
    ("egress_bytes", "egress"),
    ("min_cache_limit_bytes", "min cache limit"),
    ("wall_s", "wall s"),
    ("peak_rss_mib", "peak RSS MiB"),
)


def render_side_by_side(result: dict[str, Any]) -> str:
    shape = result["example"]
    lines = [
        f"MosaicML's `sim_script.py` example: {shape['shards']:,} shards x {shape['samples_per_shard']:,} samples "
        f"({shape['raw_bytes']:,} B raw, {shape['zip_bytes']:,} B compressed), {shape['nodes']} nodes x "
        f"{shape['devices']} devices x {shape['workers']} workers, device batch {shape['device_batch']}, "
        f"predownload {shape['predownload']}, py1e over {shape['canonical_nodes']} canonical nodes with blocks "
        f"of {shape['shuffle_block_size']:,}, {shape['time_per_sample']} s per sample, "
        f"{shape['bandwidth'] / 1e6:g} MB/s per node, {shape['steps']:,} batches; then the same at "
        f"{FAST_LINK / 1e6:,.0f} MB/s. The last row of ours adds "
        f"{result['left_out']['latency'] * 1e3:g} ms to each request's first byte, decompression at "
        f"{result['left_out']['decompress_rate'] / 1e6:g} MB/s per download thread and "
        f"{result['left_out']['sample_time'] * 1e6:g} us of reading per sample. The half-block row reads the "
        "same shape with `shuffle_block_size` halved: our `py1e` is a block shuffle, whose first steps touch "
        "about twice the shards MosaicML's `py1e` does (see the note below).",
        "",
    ]
    for case in result["cases"]:
        rows = []
        for library, run in case["runs"].items():
            if "skipped" in run:
                rows.append([library, f"not run: {run['skipped']}", *["-"] * (len(SIDE_BY_SIDE_COLUMNS) - 1)])
            else:
                rows.append([library, *[_cell(run, key) for key, _ in SIDE_BY_SIDE_COLUMNS]])
        title = (
            "their example" if case["bandwidth"] == shape["bandwidth"] else "the same with a 10 Gbit/s link"
        )
        lines += [f"**{case['bandwidth'] / 1e6:,.0f} MB/s per node ({title}).**", ""]
        lines += [markdown_table(["simulator", *[title for _, title in SIDE_BY_SIDE_COLUMNS]], rows), ""]
    return "\n".join(lines).rstrip("\n")


def render_scale(result: dict[str, Any]) -> str:
    shape, runs = result["scale"], result["scale_runs"]
    seconds = sorted(run["seconds"] for run in runs)
    peaks = sorted(run["peak_rss_mib"] for run in runs)
    run = runs[0]
    return (
        f"One shuffled epoch (py1e) of {shape['shards']:,} shards x {shape['samples_per_shard']:,} samples "
        f"({run['samples']:,} samples, {run['steps']:,} steps) on {shape['nodes']} nodes x {shape['devices']} "
        f"devices, device batch {shape['batch']}, in a fresh process per run ({len(runs)} run"
        f"{'s' if len(runs) != 1 else ''}). Wall time runs from building the workload to the result. The "
        "engine plans the nodes' reads in helper processes where it has cores to spare: the memory figure "
        "adds every process's own peak (VmHWM), an upper bound of what the machine held at once.\n\n"
        + markdown_table(
            [
                "wall s (median)",
                "spread",
                "main process CPU s",
                "peak RSS MiB, all processes (median)",
                "spread",
                "main process MiB",
                "helper processes MiB",
                "after imports MiB",
            ],
            [
                [
                    f"{seconds[len(seconds) // 2]:.1f}",
                    f"{seconds[0]:.1f}..{seconds[-1]:.1f}",
                    f"{run['cpu_seconds']:.1f}",
                    f"{peaks[len(peaks) // 2]:,.0f}",
                    f"{peaks[0]:,.0f}..{peaks[-1]:,.0f}",
                    f"{run['main_peak_rss_mib']:,.0f}",
                    " + ".join(f"{mib:,.0f}" for mib in run["helper_peak_rss_mib"]) or "none",
                    f"{run['rss_after_imports_mib']:,.0f}",
                ]
            ],
        )
    )


def render(result: dict[str, Any]) -> str:
    return render_side_by_side(result)


def extra_sections(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [("A billion-sample epoch: time and memory", render_scale(result))]


def targets(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    shape, runs = result["scale"], result["scale_runs"]
    if shape != SCALE:
        return []
    seconds = sorted(run["seconds"] for run in runs)[len(runs) // 2]
    peak = sorted(run["peak_rss_mib"] for run in runs)[len(runs) // 2]
    return [
        (
            "simulate a 1M-shard, 1B-sample epoch on 64 x 8: < 60 s and < 4 GB (issue 29)",
            f"{seconds:.1f} s, {peak / 1024:.2f} GiB",
            seconds < SCALE_TARGET_SECONDS and peak < SCALE_TARGET_MIB,
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, ours only")
    parser.add_argument("--part", choices=("side-by-side", "scale", "both", "tune"), default="both")
    parser.add_argument("--price-per-gb", type=float, default=0.09, help="egress price for --part tune")
    parser.add_argument("--target-throughput", type=float, default=None, help="samples/s for --part tune")
    parser.add_argument("--repeats", type=int, default=1, help="runs of the scale figure")
    arguments = parser.parse_args()
    print("\n".join(machine_lines()), end="\n\n")
    if arguments.part in ("side-by-side", "both"):
        print(render_side_by_side(measure_side_by_side(arguments.smoke)), end="\n\n")
    if arguments.part == "tune":  # the example at 10 Gbit/s, where the settings decide the stalls
        shape = {**(SMOKE_C4_LIKE if arguments.smoke else C4_LIKE), "bandwidth": FAST_LINK}
        print(tune_example(shape, arguments.price_per_gb, arguments.target_throughput))
    if arguments.part in ("scale", "both"):
        print(render_scale(measure_scale(arguments.smoke, arguments.repeats)))


if __name__ == "__main__":
    main()
