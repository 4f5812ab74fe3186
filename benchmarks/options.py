"""What every figure's ``measure`` receives: how hard to measure, and which libraries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks.workloads import BARE, FULL_WORKLOADS, LITDATA, MOSAICML, OURS, SMOKE_WORKLOADS, Workload


@dataclass(frozen=True)
class Options:
    """``smoke``: ours (and the bare ceiling) only, tiny sizes, one round; what CI runs."""

    repeats: int
    smoke: bool
    data_root: Path

    @property
    def workloads(self) -> tuple[Workload, ...]:
        return SMOKE_WORKLOADS if self.smoke else FULL_WORKLOADS

    @property
    def libraries(self) -> tuple[str, ...]:
        """Streaming libraries side by side (the bare ceiling is added by the figures that have one)."""
        return (OURS,) if self.smoke else (OURS, MOSAICML, LITDATA)

    @property
    def rounds(self) -> int:
        return 1 if self.smoke else self.repeats

    def with_bare(self) -> tuple[str, ...]:
        return (*self.libraries, BARE)
