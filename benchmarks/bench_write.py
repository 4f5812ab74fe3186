"""Write throughput: our MDSWriter against MosaicML Streaming's, side by side in one run.

Run it in the peers environment (``./benchmarks/run write``); ``--smoke`` runs ours only, tiny sizes.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import Measurement, interleaved, machine_lines, markdown_table, timed

COLUMNS = {"id": "int", "data": "bytes"}


def make_payloads(count: int, size: int, seed: int = 0) -> list[bytes]:
    """``count`` distinct random payloads of ``size`` bytes, views of one buffer to keep set-up cheap."""
    pool = np.random.default_rng(seed).integers(0, 256, size=count + size, dtype=np.uint8).tobytes()
    return [pool[i : i + size] for i in range(count)]


def write_with(writer_class: type, folder: Path, payloads: list[bytes]) -> None:
    with writer_class(out=str(folder), columns=COLUMNS, size_limit=1 << 26, exist_ok=True) as writer:
        for index, data in enumerate(payloads):
            writer.write({"id": index, "data": data})


def writers(include_peers: bool) -> dict[str, type]:
    from stream_plugin import MDSWriter

    found: dict[str, type] = {"stream_plugin": MDSWriter}
    if include_peers:
        from streaming import MDSWriter as MosaicMDSWriter

        found["mosaicml-streaming"] = MosaicMDSWriter
    return found


def _runner(writer_class: type, folder: Path, payloads: list[bytes]) -> Callable[[], float]:
    def once() -> float:
        shutil.rmtree(folder, ignore_errors=True)
        return len(payloads) / timed(lambda: write_with(writer_class, folder, payloads))

    return once


def run(workloads: list[tuple[int, int]], repeats: int, include_peers: bool) -> list[Measurement]:
    results: list[Measurement] = []
    root = Path(tempfile.mkdtemp(prefix="bench-write-"))
    try:
        for count, size in workloads:
            payloads = make_payloads(count, size)
            figure = _figure_name(count, size)

            runners = {
                name: _runner(writer_class, root / name, payloads)
                for name, writer_class in writers(include_peers).items()
            }
            results += interleaved(runners, repeats=repeats, figure=figure, unit="samples/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


def report(results: list[Measurement], sizes: dict[str, int]) -> str:
    rows = []
    by_figure: dict[str, dict[str, Measurement]] = {}
    for measurement in results:
        by_figure.setdefault(measurement.figure, {})[measurement.library] = measurement
    for figure, libraries in by_figure.items():
        ours = libraries["stream_plugin"].median
        for name, measurement in libraries.items():
            megabytes = measurement.median * sizes[figure] / 2**20
            ratio = ours / measurement.median
            rows.append(
                [
                    figure,
                    name,
                    f"{measurement.median:,.0f}",
                    measurement.spread(),
                    f"{megabytes:,.1f}",
                    f"{ratio:.2f}x",
                ]
            )
    headers = ["workload", "library", "samples/s (median)", "spread", "MB/s", "ours / this"]
    return markdown_table(headers, rows)


# --------------------------------------------------------------------------------------------------
# The harness figure.

FIGURE = "write"
TITLE = "Write throughput (MDSWriter vs MosaicML Streaming's MDSWriter)"
DESCRIPTION = (
    'Same samples for both (`{"id": int, "data": bytes}`, random payloads), same `size_limit` '
    "(64 MiB), no compression or hashes, written to local disk; each round writes with both writers."
)
FULL_WRITES = [(500_000, 1024), (10_000, 100 * 1024)]
SMOKE_WRITES = [(2_000, 1024), (100, 100 * 1024)]


def _figure_name(count: int, size: int) -> str:
    return f"write {count:,} x {size // 1024} KiB"


def measure(options: Any) -> dict[str, Any]:
    workloads = SMOKE_WRITES if options.smoke else FULL_WRITES
    results = run(workloads, repeats=options.rounds, include_peers=not options.smoke)
    return {
        "rows": [asdict(measurement) for measurement in results],
        "sizes": {_figure_name(count, size): size for count, size in workloads},
    }


def render(result: dict[str, Any]) -> str:
    return report([Measurement(**row) for row in result["rows"]], result["sizes"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="ours only, tiny sizes (CI)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    workloads = SMOKE_WRITES if args.smoke else FULL_WRITES
    results = run(workloads, repeats=1 if args.smoke else args.repeats, include_peers=not args.smoke)
    sizes = {_figure_name(count, size): size for count, size in workloads}
    print("\n".join(machine_lines()))
    print()
    print(report(results, sizes))


if __name__ == "__main__":
    main()
