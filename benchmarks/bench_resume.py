"""Resume latency: time from ``load_state_dict`` to the first batch, at 10%, 50% and 90% of an epoch.

Each library resumes from its own checkpoint format in a fresh process with a freshly built loader
(built before the timer; ``batch_size=256``, shuffle on, 0 and 2 workers). Ours and MosaicML's states
are made by their ``dataset.state_dict(num_samples, from_beginning=True)`` (what their loaders save);
litdata's only comes out of a loader that really iterated that far, so its state is made that way,
once, outside the timed runs. The 10M-sample dataset (issue 4's target: under 1 s at any position)
runs for ours and MosaicML only: iterating litdata 9M samples just to obtain a state is not worth it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.common import median_of, run_child, spread_of
from benchmarks.libraries import BATCH_SIZE, LoaderSpec, batch_length, first_id, import_library, make_loader
from benchmarks.options import Options
from benchmarks.workloads import LITDATA, MOSAICML, OURS, SMALL_SAMPLES, Workload, folder_for, prepare

FIGURE = "resume"
TITLE = "Resume latency"
FRACTIONS = (0.1, 0.5, 0.9)
WORKERS = (0, 2)
TEN_MILLION = Workload(10_000_000, 16)
SMOKE_WORKLOAD = Workload(4_000, 1024)


def state_at(library: str, local: str, num_workers: int, position: int) -> Any:
    """The library's resume state after ``position`` samples of epoch 0 (shuffle on)."""
    import_library(library)
    dataset, loader = make_loader(LoaderSpec(library, local, shuffle=True, num_workers=num_workers))
    if library == OURS:
        return dataset.state_dict(position, from_beginning=True)
    if library == MOSAICML:
        return {
            "epoch": 0,
            "sample_in_epoch": position,
            "num_canonical_nodes": 1,
            "shuffle_seed": dataset.shuffle_seed,
            "initial_physical_nodes": 1,
        }
    consumed = 0
    for batch in loader:
        consumed += batch_length(batch)
        if consumed >= position:
            break
    return loader.state_dict()


def resume_once(library: str, local: str, num_workers: int, state: Any) -> dict[str, Any]:
    """Time ``load_state_dict`` plus the first batch, on a loader built before the timer."""
    import_library(library)
    _, loader = make_loader(LoaderSpec(library, local, shuffle=True, num_workers=num_workers))
    start = time.perf_counter()
    loader.load_state_dict(state)
    batches = iter(loader)
    batch = next(batches)
    seconds = time.perf_counter() - start
    del batches
    return {"seconds": seconds, "first_id": first_id(batch)}


def measure(options: Options) -> dict[str, Any]:
    workloads: list[tuple[Workload, tuple[str, ...]]]
    if options.smoke:
        workloads = [(SMOKE_WORKLOAD, options.libraries)]
    else:
        workloads = [(SMALL_SAMPLES, options.libraries), (TEN_MILLION, (OURS, MOSAICML))]
    fractions, worker_counts = ((0.5,), (2,)) if options.smoke else (FRACTIONS, WORKERS)
    cases = []
    for workload, libraries in workloads:
        prepare(options.data_root, workload, libraries)
        for fraction in fractions:
            position = round(fraction * workload.count / BATCH_SIZE) * BATCH_SIZE
            for workers in worker_counts:
                for library in libraries:
                    local = str(folder_for(options.data_root, workload, library))
                    state = run_child(
                        "benchmarks.bench_resume:state_at",
                        library=library,
                        local=local,
                        num_workers=workers,
                        position=position,
                    )
                    cases.append(
                        {
                            "workload": workload.name,
                            "fraction": fraction,
                            "position": position,
                            "workers": workers,
                            "library": library,
                            "local": local,
                            "state": state,
                            "runs": [],
                        }
                    )
    for _ in range(options.rounds):
        for case in cases:
            case["runs"].append(
                run_child(
                    "benchmarks.bench_resume:resume_once",
                    library=case["library"],
                    local=case["local"],
                    num_workers=case["workers"],
                    state=case["state"],
                )
            )
    for case in cases:
        del case["local"]
    return {"rows": cases}


def _key(row: dict[str, Any]) -> tuple[str, float, int]:
    return (row["workload"], row["fraction"], row["workers"])


def render(result: dict[str, Any]) -> str:
    ours = {
        _key(row): median_of([run["seconds"] for run in row["runs"]])
        for row in result["rows"]
        if row["library"] == OURS
    }
    lines = [
        "| dataset | position | workers | library | seconds (median) | spread | ours / this |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in sorted(result["rows"], key=lambda r: (*_key(r), r["library"] != OURS)):
        seconds = [run["seconds"] for run in row["runs"]]
        mine = ours.get(_key(row))
        # For latencies, "ours / this" is their time over ours: above 1x means we resume faster.
        faster = f"{median_of(seconds) / mine:.2f}x" if mine else "n/a"
        lines.append(
            f"| {row['workload']} | {row['fraction']:.0%} (sample {row['position']:,}) | {row['workers']} | "
            f"{row['library']} | {median_of(seconds):.3f} | {spread_of(seconds, 3)} | {faster} |"
        )
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    checks = []
    for row in result["rows"]:
        if row["library"] == OURS and row["workload"] == TEN_MILLION.name:
            seconds = median_of([run["seconds"] for run in row["runs"]])
            what = f"resume 10M samples at {row['fraction']:.0%}, {row['workers']} workers: < 1 s"
            checks.append((what, f"{seconds:.3f} s", seconds < 1.0))
    return checks


def plot(result: dict[str, Any], path: Path) -> None:
    """Resume latency against position in the epoch, one line per (dataset, library, workers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    for row in result["rows"]:
        seconds = median_of([run["seconds"] for run in row["runs"]])
        lines.setdefault((row["workload"], row["library"], row["workers"]), []).append(
            (row["fraction"], seconds)
        )
    colors = {OURS: "C0", MOSAICML: "C1", LITDATA: "C2"}  # as in the iteration plot
    figure, axis = plt.subplots(figsize=(10, 4.5))
    for (workload, library, workers), points in sorted(lines.items()):
        points.sort()
        axis.plot(
            [100 * x for x, _ in points],
            [y for _, y in points],
            "-" if workload == TEN_MILLION.name else "--",
            color=colors.get(library, "C3"),
            marker="o" if workers == 0 else "s",
            label=f"{library}, {workload}, {workers} workers",
        )
    axis.axhline(1.0, color="grey", linewidth=0.8)
    axis.set_yscale("log")
    axis.set_xlabel("resume position (% of the epoch)")
    axis.set_ylabel("load_state_dict -> first batch (s, log)")
    axis.set_title("Resume latency, batch 256, shuffle on (grey: issue 4's 1 s target)", fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
