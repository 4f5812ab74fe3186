"""Conversion throughput: our parallel ``map_to_mds`` against MosaicML's MDSWriter and litdata's optimize.

Every library gets the same inputs and the same function: ``make_samples(i)`` yields the samples of
input ``i`` (``{"id": int, "data": bytes}``, 1 KiB random payloads), so the figure measures writing,
not reading. Ours and litdata's ``optimize`` run with N = 1 and 2 worker processes (ours with N = 1
writes in-process; litdata always starts its workers); MosaicML has no parallel writer, so its single
``MDSWriter`` loops over the same inputs. Samples/s over the whole call, output folder fresh each run,
64 MiB shards, no compression. CPU seconds add up every process of the call (user + system), a
measure that does not depend on how busy the shared machine was.

Run with ``./benchmarks/run convert`` (peers environment), or alone:
``.venv-peers/bin/python -m benchmarks.bench_convert --repeats 3``.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import Measurement, interleaved, machine_lines, markdown_table, timed

COLUMNS = {"id": "int", "data": "bytes"}
PAYLOAD = 1024
_POOL = np.random.default_rng(0).integers(0, 256, size=1 << 20, dtype=np.uint8).tobytes()
_PER_INPUT = {"samples": 2000}  # set by the runner; worker processes see the module default


def make_samples(item: int) -> Iterator[dict[str, Any]]:
    """The samples of input ``item``: ``_PER_INPUT['samples']`` of them, each with a distinct 1 KiB payload."""
    count = _PER_INPUT["samples"]
    for k in range(count):
        start = (item * count + k) * 7 % (len(_POOL) - PAYLOAD)
        yield {"id": item * count + k, "data": _POOL[start : start + PAYLOAD]}


def ours(workers: int) -> Callable[[list[int], Path], None]:
    def run(inputs: list[int], out: Path) -> None:
        from stream_plugin.converters import map_to_mds

        map_to_mds(make_samples, inputs, str(out), columns=COLUMNS, workers=workers, progress=False)

    return run


def mosaicml_single_writer(inputs: list[int], out: Path) -> None:
    from streaming import MDSWriter

    with MDSWriter(out=str(out), columns=COLUMNS, size_limit=1 << 26) as writer:
        for item in inputs:
            for sample in make_samples(item):
                writer.write(sample)


def litdata(workers: int) -> Callable[[list[int], Path], None]:
    def run(inputs: list[int], out: Path) -> None:
        from litdata import optimize

        optimize(fn=make_samples, inputs=inputs, output_dir=str(out), num_workers=workers, chunk_bytes="64MB")

    return run


def libraries(include_peers: bool) -> dict[str, Callable[[list[int], Path], None]]:
    found = {"stream_plugin N=1": ours(1), "stream_plugin N=2": ours(2)}
    if include_peers:
        found |= {
            "mosaicml MDSWriter (1 process)": mosaicml_single_writer,
            "litdata optimize N=1": litdata(1),
            "litdata optimize N=2": litdata(2),
        }
    return found


def cpu_seconds() -> float:
    """CPU time of this process and of its finished (joined) children, user plus system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run(inputs: int, repeats: int, include_peers: bool) -> tuple[list[Measurement], int]:
    items = list(range(inputs))
    total = inputs * _PER_INPUT["samples"]
    root = Path(tempfile.mkdtemp(prefix="bench-convert-"))
    figure = f"convert {total:,} x 1 KiB from {inputs} inputs"
    cpu: dict[str, Measurement] = {}

    def runner(name: str, convert: Callable[[list[int], Path], None]) -> Callable[[], float]:
        cpu[name] = Measurement(figure, name, "cpu s")

        def once() -> float:
            out = root / name.replace(" ", "_").replace("=", "")
            shutil.rmtree(out, ignore_errors=True)
            before = cpu_seconds()
            seconds = timed(lambda: convert(items, out))
            cpu[name].values.append(cpu_seconds() - before)
            return total / seconds

        return once

    try:
        runners = {name: runner(name, convert) for name, convert in libraries(include_peers).items()}
        rates = interleaved(runners, repeats=repeats, figure=figure, unit="samples/s")
        return rates + list(cpu.values()), total
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(results: list[Measurement]) -> str:
    rates = [m for m in results if m.unit == "samples/s"]
    cpu = {m.library: m for m in results if m.unit == "cpu s"}
    baseline = {m.library: m.median for m in rates}.get("mosaicml MDSWriter (1 process)")
    rows = [
        [
            m.figure,
            m.library,
            f"{m.median:,.0f}",
            m.spread(),
            f"{m.median * PAYLOAD / 2**20:,.1f}",
            f"{cpu[m.library].median:.2f}" if m.library in cpu else "-",
            f"{m.median / baseline:.2f}x" if baseline else "-",
        ]
        for m in rates
    ]
    headers = [
        "workload",
        "library",
        "samples/s (median)",
        "spread",
        "MB/s",
        "CPU s, all processes (median)",
        "vs MosaicML MDSWriter",
    ]
    return markdown_table(headers, rows)


# --------------------------------------------------------------------------------------------------
# The harness figure.

FIGURE = "convert"
TITLE = "Conversion throughput (parallel map_to_mds vs MosaicML MDSWriter and litdata optimize)"
FULL_INPUTS = 64  # x 2000 samples = 128,000 samples, 125 MiB
SMOKE_INPUTS = 4


def measure(options: Any) -> dict[str, Any]:
    results, total = run(SMOKE_INPUTS if options.smoke else FULL_INPUTS, options.rounds, not options.smoke)
    return {"rows": [asdict(measurement) for measurement in results], "samples": total}


def render(result: dict[str, Any]) -> str:
    return report([Measurement(**row) for row in result["rows"]])


def extra_sections(result: dict[str, Any]) -> list[tuple[str, str]]:
    """What the figures say about parallelism on this machine (every number from ``result``)."""
    medians = {(row["library"], row["unit"]): statistics.median(row["values"]) for row in result["rows"]}
    one, two = medians.get(("stream_plugin N=1", "cpu s")), medians.get(("stream_plugin N=2", "cpu s"))
    if one is None or two is None:
        return []
    text = (
        f"Ours with N = 2 used {two:.2f} CPU s against {one:.2f} with N = 1: the {two - one:.2f} s more are "
        "two spawned interpreters starting (imports) and handing results back, paid once per call."
    )
    rate = {library: value for (library, unit), value in medians.items() if unit == "samples/s"}
    ours_one, ours_two = rate.get("stream_plugin N=1"), rate.get("stream_plugin N=2")
    if ours_one and ours_two:
        text += (
            f" In wall-clock samples/s, N = 2 ran at {ours_two / ours_one:.2f}x N = 1 in this run: a second "
            "process pays off only where a core is free for it and its part takes longer than starting "
            "an interpreter."
        )
        peers = [
            (
                "litdata's optimize at the same N",
                rate.get("litdata optimize N=1"),
                rate.get("litdata optimize N=2"),
            ),
            (
                "MosaicML's single writer",
                rate.get("mosaicml MDSWriter (1 process)"),
                rate.get("mosaicml MDSWriter (1 process)"),
            ),
        ]
        compared = [
            f"{ours_one / at_one:.2f}x (N = 1) and {ours_two / at_two:.2f}x (N = 2) {name}"
            for name, at_one, at_two in peers
            if at_one and at_two
        ]
        if compared:
            text += " Ours is " + ", and ".join(compared) + "."
    text += " The sample order is the same for any N (tests/converters/test_parallel.py)."
    return [("Parallelism on this machine", text)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="ours only, tiny sizes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--inputs", type=int, default=FULL_INPUTS)
    args = parser.parse_args()
    inputs = SMOKE_INPUTS if args.smoke else args.inputs
    results, _ = run(inputs, repeats=1 if args.smoke else args.repeats, include_peers=not args.smoke)
    print("\n".join(machine_lines()))
    print()
    print(report(results))


if __name__ == "__main__":
    main()
