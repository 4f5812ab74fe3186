"""Shared pieces of the benchmark harness: timing, repetition, interleaving and Markdown tables."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata


@dataclass
class Measurement:
    """Repeated values of one figure for one library; reported as median and spread (min..max)."""

    figure: str
    library: str
    unit: str
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def spread(self) -> str:
        return f"{min(self.values):,.0f}..{max(self.values):,.0f}"


def interleaved(
    runners: dict[str, Callable[[], float]], *, repeats: int, figure: str, unit: str
) -> list[Measurement]:
    """Run every library once per round, ``repeats`` rounds, so drift on a shared machine hits all alike."""
    results = {name: Measurement(figure, name, unit) for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            results[name].values.append(run())
    return list(results.values())


def timed(operation: Callable[[], object]) -> float:
    start = time.perf_counter()
    operation()
    return time.perf_counter() - start


def version_of(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_lines() -> list[str]:
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    packages = ["stream-plugin", "mosaicml-streaming", "litdata", "torch", "numpy"]
    versions = ", ".join(f"{name} {version_of(name)}" for name in packages)
    return [
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, {memory_gib:.0f} GiB memory, {platform.system()}",
        f"- python: {sys.version.split()[0]}",
        f"- libraries: {versions}",
    ]


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
