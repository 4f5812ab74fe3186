"""Our iteration throughput at two core commits, interleaved in one run: does a change slow reading?

    .venv/bin/python -m benchmarks.compare_commits --base eb2e67b [--head HEAD] [--repeats 5] [--batch-size 256]

Each commit's ``stream_plugin/`` is extracted with ``git archive`` and put first on ``PYTHONPATH`` of
fresh child processes; both read the same MDS data (1 KiB x 200k and 100 KiB x 10k samples) through
``StreamingDataLoader`` with the harness's loader settings (``benchmarks.libraries``; ``--batch-size``
changes the batch size), shuffle on and off, 0 and 2 workers. Prints samples/s (median of the rounds)
per case and head / base: per CPU second of the process with 0 workers (all reading happens in it),
per wall second with 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

from benchmarks.common import REPO_DIR, markdown_table, median_of, spread_of
from benchmarks.libraries import BATCH_SIZE

CHILD = """
import json, sys, time
import stream_plugin
from benchmarks.libraries import LoaderSpec, batch_length, make_loader
local, shuffle, workers, batch_size = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
spec = LoaderSpec("stream_plugin", local, shuffle=shuffle, num_workers=workers, batch_size=batch_size)
_, loader = make_loader(spec)
batches = iter(loader)
next(batches)
start, cpu = time.perf_counter(), time.process_time()
samples = sum(batch_length(batch) for batch in batches)
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
# Without workers all the reading is this process's: CPU seconds, which a shared machine disturbs less.
print(json.dumps({"rate": samples / (cpu if workers == 0 else wall), "core": stream_plugin.__file__}))
"""
WORKLOADS = {"1 KiB x 200k": (1024, 200_000), "100 KiB x 10k": (100 * 1024, 10_000)}


def extract(commit: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, "stream_plugin"], cwd=REPO_DIR, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def write(folder: Path, size: int, count: int) -> None:
    from stream_plugin import MDSWriter

    payload = b"x" * size
    with MDSWriter(out=str(folder), columns={"id": "int", "data": "bytes"}, size_limit=1 << 26) as writer:
        for sample_id in range(count):
            writer.write({"id": sample_id, "data": payload})


def rate(core: Path, local: Path, shuffle: bool, workers: int, batch_size: int = BATCH_SIZE) -> float:
    env = {**os.environ, "PYTHONPATH": f"{core}{os.pathsep}{REPO_DIR}"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(local), "1" if shuffle else "0", str(workers), str(batch_size)],
        env=env, check=True, capture_output=True, text=True, cwd=core,
    ).stdout  # fmt: skip
    found = json.loads(out.strip().splitlines()[-1])
    assert found["core"].startswith(str(core)), f"the child imported {found['core']}, not the core under {core}"
    return float(found["rate"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", required=True)
    parser.add_argument("--head", default="HEAD")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cores = {name: extract(commit, root / name) for name, commit in (("base", args.base), ("head", args.head))}
        rows = []
        for workload, (size, count) in WORKLOADS.items():
            local = root / workload.replace(" ", "_")
            write(local, size, count)
            for shuffle in (False, True):
                for workers in (0, 2):
                    rates: dict[str, list[float]] = {"base": [], "head": []}
                    for _ in range(args.repeats):
                        for name, core in cores.items():
                            rates[name].append(rate(core, local, shuffle, workers, args.batch_size))
                    base, head = median_of(rates["base"]), median_of(rates["head"])
                    rows.append([
                        workload, str(args.batch_size), "on" if shuffle else "off", str(workers), f"{base:,.0f}", spread_of(rates["base"]),
                        f"{head:,.0f}", spread_of(rates["head"]), f"{head / base:.2f}x",
                    ])  # fmt: skip
                    print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    headers = ["samples", "batch", "shuffle", "workers", f"base {args.base}", "spread", f"head {args.head}", "spread", "head / base"]
    print(markdown_table(headers, rows))


if __name__ == "__main__":
    main()
