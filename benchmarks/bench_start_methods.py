"""What the loader's fast path costs when DataLoader workers are not forked (issue 36 §4).

    .venv/bin/python -m benchmarks.bench_start_methods --samples 200000 --repeats 3

Python 3.14 makes ``forkserver`` the default start method on Linux, and macOS uses ``spawn``. Workers
that are not forked start a fresh interpreter (spawn) or fork from a clean server (forkserver), import
the dataset's code and receive the dataset pickled. Both parts of the fast path need forked workers,
which inherit them: the pipe per worker (``torch_internals.worker_pipes``) and the shared region that
batches are packed into (``transport.SharedRegion``); other workers run torch's own queues (the same
batches, in the same order). This measures, for 2 workers, each
start method on the fast path and on torch's own iterator (``torch_iterator=True``): the time to the
first batch (worker start-up included), the epoch's time, and samples/s over the epoch's second half
(after both workers started: with 2 workers the first batch needs only one), for ``--samples`` 1 KiB
samples read from a warm local folder, shuffle on, batch 256. Each measurement runs in a fresh process;
the start methods are interleaved in each round. Prints a Markdown table (medians, and each round).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

START_METHODS = ("fork", "forkserver", "spawn")
BATCH = 256


def write(folder: Path, samples: int) -> None:
    from stream_plugin import MDSWriter

    payload = bytes(1024)
    with MDSWriter(out=str(folder), columns={"id": "int", "data": "bytes"}, size_limit=1 << 24) as writer:
        for sample_id in range(samples):
            writer.write({"id": sample_id, "data": payload})


def measure(folder: str, start_method: str, torch_iterator: bool) -> dict[str, float]:
    """One epoch in this process: seconds to the first batch and for the epoch, and samples/s over
    its second half (both workers long started, whatever the start method)."""
    from stream_plugin import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(local=folder, shuffle=True, batch_size=BATCH)
    loader = StreamingDataLoader(
        dataset,
        batch_size=BATCH,
        num_workers=2,
        multiprocessing_context=start_method,
        torch_iterator=torch_iterator,
    )
    half = len(loader) // 2
    started = time.perf_counter()
    first = middle = 0.0
    samples = 0
    for index, batch in enumerate(loader):
        if index == 0:
            first = time.perf_counter()
        elif index == half:
            middle = time.perf_counter()
        elif index > half:
            samples += len(batch["id"])
    ended = time.perf_counter()
    return {
        "first_batch_s": first - started,
        "epoch_s": ended - started,
        "samples_per_s": samples / (ended - middle),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(**json.loads(args.child))))
        return
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "data"
        write(folder, args.samples)
        cases = [(method, torch_iterator) for torch_iterator in (False, True) for method in START_METHODS]
        results: dict[tuple[str, bool], list[dict[str, float]]] = {case: [] for case in cases}
        for _ in range(args.repeats):
            for method, torch_iterator in cases:
                child = json.dumps(
                    {"folder": str(folder), "start_method": method, "torch_iterator": torch_iterator}
                )
                output = subprocess.run(
                    [sys.executable, "-m", "benchmarks.bench_start_methods", "--child", child],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                results[(method, torch_iterator)].append(json.loads(output.strip().splitlines()[-1]))
    print(
        "| iterator | start method | samples/s, 2nd half (median) | rounds | first batch s (median) | rounds | epoch s (median) |"
    )
    print("|---|---|---|---|---|---|---|")
    for (method, torch_iterator), runs in results.items():
        speeds = [run["samples_per_s"] for run in runs]
        firsts = [run["first_batch_s"] for run in runs]
        epochs = [run["epoch_s"] for run in runs]
        print(
            f"| {'torch' if torch_iterator else 'fast path'} | {method} | {statistics.median(speeds):,.0f} | "
            f"{', '.join(f'{s:,.0f}' for s in speeds)} | {statistics.median(firsts):.2f} | "
            f"{', '.join(f'{f:.2f}' for f in firsts)} | {statistics.median(epochs):.2f} |"
        )


if __name__ == "__main__":
    main()
