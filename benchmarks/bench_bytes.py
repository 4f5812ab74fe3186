"""Large ``bytes`` samples read in order without a copy: ours copying, ours ``zero_copy=True``, litdata.

The iteration figure's 10k x 100 KiB workload (``workloads.LARGE_SAMPLES``: our MDS shards and litdata's
chunks of the same samples), read in order by 0 workers from a warm local copy, through each library's
own loader (batch 256) with a collate that keeps the values as they come (a list per column): bytes for
ours by default, read-only memoryviews of the shard's map for ours with ``zero_copy=True``, and
litdata's values as its loader hands them out (``bytes`` for these chunks; the table says each type). The figure is samples/s over the whole epoch after the first
batch, each run in a fresh process, rounds interleaved; the payloads are summed at one byte per sample
so that every reader hands over something that can be read.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.common import median_of, ratio, run_child, spread_of
from benchmarks.libraries import import_library
from benchmarks.options import Options
from benchmarks.workloads import LARGE_SAMPLES, LITDATA, OURS, Workload, prepare, warm_page_cache

FIGURE = "bytes"
TITLE = "Large bytes samples in order, without a copy (10k x 100 KiB, 0 workers)"
OURS_ZERO_COPY = f"{OURS} zero_copy=True"
SMOKE_SAMPLES = Workload(64, 100 * 1024, batch_size=16)


def keep_values(samples: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The collate every reader uses here: a list per column, values untouched (no copy, no tensor)."""
    return {"id": [sample["id"] for sample in samples], "data": [sample["data"] for sample in samples]}


def _loader(reader: str, local: str, batch_size: int) -> Any:
    if reader in (OURS, OURS_ZERO_COPY):
        from stream_plugin import StreamingDataLoader, StreamingDataset

        ours = StreamingDataset(
            local=local, batch_size=batch_size, num_canonical_nodes=1, zero_copy=reader == OURS_ZERO_COPY
        )
        return StreamingDataLoader(ours, batch_size=batch_size, num_workers=0, collate_fn=keep_values)
    from litdata import StreamingDataLoader as LitLoader
    from litdata import StreamingDataset as LitDataset

    return LitLoader(LitDataset(input_dir=local), batch_size=batch_size, num_workers=0, collate_fn=keep_values)


def measure_once(reader: str, local: str, batch_size: int) -> dict[str, Any]:
    """One pass in this (fresh) process: samples/s after the first batch."""
    import_library(OURS if reader == OURS_ZERO_COPY else reader)
    batches = iter(_loader(reader, local, batch_size))
    first = next(batches)
    start, cpu_start = time.perf_counter(), time.process_time()
    samples = 0
    touched = 0
    for batch in batches:
        samples += len(batch["id"])
        touched += sum(value[0] for value in batch["data"])  # one byte of each payload
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        "samples_per_s": samples / seconds,
        "cpu_us_per_sample": 1e6 * cpu / samples,  # 0 workers: all of it in this process
        "samples": samples,
        "value_type": type(first["data"][0]).__name__,
        "touched": touched,
    }


def targets(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """Issue 38 asks for the option and the figure; the check here: zero-copy reads at least as fast as litdata."""
    speed = {row["reader"]: median_of([run["samples_per_s"] for run in row["runs"]]) for row in result["rows"]}
    ours, lit = speed.get(OURS_ZERO_COPY), speed.get(LITDATA)
    if ours is None or not lit:
        return []
    return [(f"bytes {result['workload']}, {OURS_ZERO_COPY}: >= litdata", f"{ours / lit:.2f}x", ours >= lit)]


def measure(options: Options) -> dict[str, Any]:
    workload = SMOKE_SAMPLES if options.smoke else LARGE_SAMPLES
    readers = (OURS, OURS_ZERO_COPY) if options.smoke else (OURS, OURS_ZERO_COPY, LITDATA)
    folders = prepare(options.data_root, workload, (OURS,) if options.smoke else (OURS, LITDATA))
    for folder in folders.values():
        warm_page_cache(folder)
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(options.rounds):
        for reader in readers:
            local = folders[LITDATA if reader == LITDATA else OURS]
            result = run_child(
                "benchmarks.bench_bytes:measure_once", reader=reader, local=str(local), batch_size=workload.batch_size
            )
            runs.setdefault(reader, []).append(result)
    return {"rows": [{"reader": reader, "runs": results} for reader, results in runs.items()], "workload": workload.name}


def render(result: dict[str, Any]) -> str:
    speed = {row["reader"]: median_of([run["samples_per_s"] for run in row["runs"]]) for row in result["rows"]}
    lit = speed.get(LITDATA)
    lines = [
        f"{result['workload']}, in order, 0 workers, warm local copy; values kept as handed out (list collate).",
        "",
        "| reader | value type | samples/s (median) | spread | vs litdata | CPU µs per sample (median) |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        values = [run["samples_per_s"] for run in row["runs"]]
        cpu = median_of([run.get("cpu_us_per_sample", 0.0) for run in row["runs"]])
        lines.append(
            f"| {row['reader']} | {row['runs'][0]['value_type']} | {median_of(values):,.0f} | {spread_of(values)} | "
            f"{ratio(median_of(values), lit) if lit else '-'} | {cpu:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys
    import tempfile

    options = Options(repeats=1, smoke="--smoke" in sys.argv, data_root=Path(tempfile.mkdtemp(prefix="bench-bytes-")))
    print(render(measure(options)))
