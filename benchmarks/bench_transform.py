"""Transform hooks against the plain read (issue 15): ``transform=``, and a subclass's pass-through
``get_item`` / ``__getitem__`` override that calls ``super()``, each at most 1.2x the plain read.

One process, no DataLoader workers, so that the figure is the per-sample cost of the reading side
(CPU time of the process, so that a shared machine disturbs it less):
    .venv/bin/python -m benchmarks.bench_transform [--samples 200000] [--size 1024] [--repeats 5]
Prints a Markdown table of samples/s (median and spread of interleaved rounds) and the cost ratio.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import interleaved, machine_lines, markdown_table, median_of, spread_of
from stream_plugin import MDSWriter, StreamingDataset


def identity(sample: Any) -> Any:
    return sample


class PassThroughGetItem(StreamingDataset):
    def get_item(self, sample_id: int) -> Any:
        return super().get_item(sample_id)


class PassThroughGetItemDunder(StreamingDataset):
    def __getitem__(self, at: Any) -> Any:
        return super().__getitem__(at)


def write(folder: Path, samples: int, size: int) -> None:
    with MDSWriter(out=str(folder), columns={"id": "int", "data": "bytes"}, size_limit=1 << 26) as writer:
        payload = b"x" * size
        for sample_id in range(samples):
            writer.write({"id": sample_id, "data": payload})


def rate(make: Callable[[], StreamingDataset]) -> Callable[[], float]:
    def run() -> float:
        dataset = make()
        iterator = iter(dataset)  # plans the pass: not part of the per-sample cost
        # CPU seconds of this process: the machine may be shared, and the reading is single-threaded.
        start = time.process_time()
        count = sum(1 for _ in iterator)
        return count / (time.process_time() - start)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "data"
        write(folder, args.samples, args.size)
        options: dict[str, Any] = {"local": str(folder), "batch_size": 256, "shuffle": True}
        variants: dict[str, Callable[[], StreamingDataset]] = {
            "plain read": lambda: StreamingDataset(**options),
            "transform= (identity)": lambda: StreamingDataset(**options, transform=identity),
            "get_item override (super)": lambda: PassThroughGetItem(**options),
            "__getitem__ override (super)": lambda: PassThroughGetItemDunder(**options),
        }
        results = interleaved(
            {name: rate(make) for name, make in variants.items()},
            repeats=args.repeats,
            figure="transform",
            unit="samples/s",
        )
    plain = results[0]
    rows = []
    for m in results:
        # Each round's cost against the plain read of the same round: drift on a shared machine cancels.
        costs = [base / value for base, value in zip(plain.values, m.values)]
        rows.append([m.library, f"{m.median:,.0f}", spread_of(m.values), f"{median_of(costs):.2f}x", spread_of(costs, 2)])
    print("\n".join(machine_lines()))
    print(f"{args.samples:,} samples of {args.size} B, shuffle on, 0 workers, {args.repeats} interleaved rounds\n")
    print(markdown_table(["variant", "samples/s", "spread", "cost vs plain read (median of rounds)", "spread"], rows))


if __name__ == "__main__":
    main()
