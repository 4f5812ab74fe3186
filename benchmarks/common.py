"""Shared pieces of the benchmark harness: timing, repetition, interleaving and Markdown tables."""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_DIR = Path(__file__).resolve().parent.parent


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


# --------------------------------------------------------------------------------------------------
# Fresh processes and memory.

RESULT_PREFIX = "BENCHMARK-RESULT "


def run_child(
    target: str,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 1800,
    wrapper: Sequence[str] = (),
    scratch: bool = False,
    **arguments: Any,
) -> Any:
    """Call ``module:function(**arguments)`` in a fresh interpreter (``benchmarks.child``); return its result.

    A fresh process per measurement gives each library the same cold start, its own peak RSS, and no
    leftovers (MosaicML's shared memory, litdata's worker state) from the library measured before it.
    ``wrapper`` is a command prefix (see ``private_shm_wrapper``). With ``scratch`` the function also
    gets ``local``: an empty folder, removed once the process has exited (so no background download of
    the library can write into it after the removal).
    """
    folder = tempfile.mkdtemp(prefix="bench-scratch-") if scratch else None
    if folder is not None:
        arguments = {**arguments, "local": folder}
    command = [*wrapper, sys.executable, "-m", "benchmarks.child", target, json.dumps(arguments)]
    try:
        completed = subprocess.run(
            command,
            cwd=REPO_DIR,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    for line in reversed(completed.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    raise RuntimeError(
        f"{target}({arguments}): expected a result line from the child process, found exit code "
        f"{completed.returncode}; its stderr ends with:\n{completed.stderr[-3000:]}"
    )


PRIVATE_SHM = ("unshare", "--mount", "sh", "-c", 'mount -t tmpfs tmpfs /dev/shm && exec "$@"', "sh")


def private_shm_wrapper() -> tuple[str, ...] | None:
    """A command prefix giving a process its own empty ``/dev/shm`` (a new mount namespace), or None
    where that is not allowed (it needs root or user namespaces). MosaicML coordinates a node through
    ``/dev/shm``, so simulated nodes on one machine need one each."""
    try:
        probe = subprocess.run([*PRIVATE_SHM, "true"], capture_output=True, timeout=30, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return PRIVATE_SHM if probe.returncode == 0 else None


def _status_mib(pid: int | str, field: str) -> float:
    """A memory field of ``/proc/<pid>/status`` (``VmHWM``, ``RssAnon``, ...) in MiB; 0 once it exited."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0.0


def vm_peak_mib(pid: int | str = "self") -> float:
    """Peak resident set size (VmHWM) of a live process, in MiB; 0 once it has exited."""
    return _status_mib(pid, "VmHWM")


def private_mib(pid: int | str = "self") -> float:
    """Resident anonymous (private) memory (RssAnon), in MiB: RSS without file and shared pages."""
    return _status_mib(pid, "RssAnon")


class PeakMemory:
    """Peak memory of this process and of each child (DataLoader workers), polled from a thread.

    Two measures per process: peak RSS (VmHWM, exact for this process; for a child, the last value
    read before it exits, so within one polling interval) and the largest private memory (RssAnon)
    seen by the polls. RSS counts the touched pages of memory-mapped shards (shared page cache);
    private memory does not, so it shows what a library itself allocates.
    """

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.children_mib: dict[int, float] = {}
        self.children_private_mib: dict[int, float] = {}
        self.main_mib = 0.0
        self.main_private_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.main_mib = vm_peak_mib()
        self.main_private_mib = max(self.main_private_mib, private_mib())

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.main_private_mib = max(self.main_private_mib, private_mib())
            for pid in child_pids():
                peak, private = vm_peak_mib(pid), private_mib(pid)
                if peak and not _is_helper(pid):
                    self.children_mib[pid] = max(peak, self.children_mib.get(pid, 0.0))
                    self.children_private_mib[pid] = max(private, self.children_private_mib.get(pid, 0.0))

    def workers_mib(self) -> list[float]:
        """Each child's peak RSS, in order of process id (start order)."""
        return [self.children_mib[pid] for pid in sorted(self.children_mib)]

    def workers_private_mib(self) -> list[float]:
        """Each child's largest private memory seen, in order of process id."""
        return [self.children_private_mib[pid] for pid in sorted(self.children_private_mib)]


def child_pids(pid: int | str = "self") -> list[int]:
    """Process ids of the descendants of ``pid``, from ``/proc/<pid>/task/*/children`` (no psutil in CI)."""
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(child) for child in (task / "children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []
    return found + [grandchild for child in found for grandchild in child_pids(child)]


def _is_helper(pid: int) -> bool:
    """multiprocessing's resource tracker (MosaicML's shared memory starts one) is not a worker."""
    try:
        return b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return True


# --------------------------------------------------------------------------------------------------
# Report pieces.


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "n/a"


def spread_of(values: Sequence[float], digits: int = 0) -> str:
    return f"{min(values):,.{digits}f}..{max(values):,.{digits}f}"


def median_of(values: Sequence[float]) -> float:
    return statistics.median(values)
