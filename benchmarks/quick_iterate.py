"""One case of the iterate figure, for a quick side-by-side check between full runs of the harness.

    .venv-peers/bin/python -m benchmarks.quick_iterate --workload "500k x 1 KiB" --workers 2 --shuffle on \
        --libraries stream_plugin mosaicml-streaming litdata --repeats 5

Same measurement as ``./benchmarks/run iterate`` (its child, ``bench_iterate.measure_once``, in a fresh
process per run, the page cache warmed first, the libraries interleaved in each round), for one
workload, shuffle setting and worker count. Prints samples/s per library (median and every round) and
ours over each other library. Nothing is written to RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.bench_iterate import SAMPLE_BUDGET
from benchmarks.common import run_child
from benchmarks.workloads import (
    BARE,
    FULL_WORKLOADS,
    LITDATA,
    MOSAICML,
    OURS,
    default_data_root,
    folder_for,
    prepare,
    warm_page_cache,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", required=True, choices=[w.name for w in FULL_WORKLOADS])
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--shuffle", choices=["on", "off"], default="on")
    parser.add_argument("--libraries", nargs="+", default=[OURS, MOSAICML, LITDATA], choices=[OURS, MOSAICML, LITDATA, BARE])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--page-cache",
        choices=["huge", "small"],
        default="huge",
        help="how the dataset is cached before each run: in huge folios as writing it leaves it (the "
        "harness's way), or in small folios, dropped and read back with read() (workloads.warm_page_cache)",
    )
    args = parser.parse_args()
    workload = next(w for w in FULL_WORKLOADS if w.name == args.workload)
    root = default_data_root()
    prepare(root, workload, tuple(library for library in args.libraries if library != BARE))
    speeds: dict[str, list[float]] = {library: [] for library in args.libraries}
    for _ in range(args.repeats):
        for library in args.libraries:
            local = folder_for(root, workload, library)
            warm_page_cache(local, small_folios=args.page_cache == "small")
            result = run_child(
                "benchmarks.bench_iterate:measure_once",
                library=library,
                local=str(local),
                shuffle=args.shuffle == "on",
                num_workers=args.workers,
                budget=min(SAMPLE_BUDGET, workload.count - workload.batch_size),
                batch_size=workload.batch_size,
            )
            speeds[library].append(result["samples_per_s"])
    print(
        f"{workload.name}, shuffle {args.shuffle}, {args.workers} workers, {args.repeats} rounds, "
        f"page cache in {args.page_cache} folios"
    )
    ours = statistics.median(speeds[OURS]) if OURS in speeds else None
    for library, values in speeds.items():
        median = statistics.median(values)
        versus = f"  ours / this {ours / median:.2f}x" if ours else ""
        print(f"{library:20} {median:12,.0f} samples/s  rounds {[round(v) for v in values]}{versus}")


if __name__ == "__main__":
    main()
