"""The one benchmark command: measure figures side by side, store each one's results, write the report.

    python -m benchmarks.harness [FIGURE ...] [--repeats N] [--smoke] [--data-dir DIR]

No figure means all of them. Each figure's results go to ``benchmarks/results/<figure>.json`` (with
the command, machine and date), and ``benchmarks/RESULTS.md`` plus its plots are rebuilt from every
stored figure and the notes in ``benchmarks/notes/`` (``report.py``), so re-measuring one figure keeps
the others and everything written about them. ``--smoke`` measures ours only at tiny
sizes into a scratch folder (the CI smoke); it never imports the peers.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import (
    bench_bytes,
    bench_cold,
    bench_convert,
    bench_egress,
    bench_egress_epochs,
    bench_images,
    bench_iterate,
    bench_order,
    bench_parquet,
    bench_resume,
    bench_simulate,
    bench_tokens,
    bench_write,
)
from benchmarks.common import REPO_DIR, machine_lines
from benchmarks.options import Options
from benchmarks.report import NOTES_DIR, write_report
from benchmarks.workloads import default_data_root
from stream_plugin.redaction import redact

FIGURES = {
    module.FIGURE: module
    for module in (
        bench_write,
        bench_iterate,
        bench_cold,
        bench_resume,
        bench_order,
        bench_egress,
        bench_egress_epochs,
        bench_convert,
        bench_tokens,
        bench_images,
        bench_bytes,
        bench_parquet,
        bench_simulate,
    )
}
RESULTS_DIR = REPO_DIR / "benchmarks" / "results"
REPORT = REPO_DIR / "benchmarks" / "RESULTS.md"


def core_version() -> str:
    """The last commit that changed ``stream_plugin/``, and whether the working tree differs from it."""

    def git(*arguments: str) -> str:
        completed = subprocess.run(
            ["git", *arguments], cwd=REPO_DIR, capture_output=True, text=True, check=False
        )
        return completed.stdout.strip()

    commit = git("log", "-1", "--format=%h", "--", "stream_plugin") or "unknown"
    changed = git("status", "--porcelain", "--", "stream_plugin")
    return f"{commit} (stream_plugin/ with uncommitted changes)" if changed else commit


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figures", nargs="*", help=f"figures to measure, of {list(FIGURES)} (default: all)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per measurement (median and spread)")
    parser.add_argument("--smoke", action="store_true", help="ours only, tiny sizes, scratch output (CI)")
    parser.add_argument("--data-dir", type=Path, default=None, help="where the benchmark datasets are kept")
    parser.add_argument("--report-only", action="store_true", help="rebuild RESULTS.md from stored results")
    parser.add_argument("--results-dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, default=None, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    unknown = [name for name in arguments.figures if name not in FIGURES]
    if unknown:
        parser.error(f"unknown figure(s) {unknown}; expected some of {list(FIGURES)}")
    return arguments


def main(argv: list[str] | None = None) -> None:
    arguments = parse_arguments(sys.argv[1:] if argv is None else argv)
    given = (arguments.results_dir, arguments.report, arguments.data_dir)
    scratch = Path(tempfile.mkdtemp(prefix="bench-smoke-")) if arguments.smoke and None in given else None
    results_dir = arguments.results_dir or (scratch / "results" if scratch else RESULTS_DIR)
    report = arguments.report or (scratch / "RESULTS.md" if scratch else REPORT)
    data_root = arguments.data_dir or (scratch / "data" if scratch else default_data_root())
    options = Options(repeats=arguments.repeats, smoke=arguments.smoke, data_root=data_root)
    command = "./benchmarks/run " + shlex.join(sys.argv[1:] if argv is None else argv)
    results_dir.mkdir(parents=True, exist_ok=True)
    for name in [] if arguments.report_only else arguments.figures or list(FIGURES):
        started = time.time()
        load_before = os.getloadavg()[0]
        print(f">> {name}: measuring", file=sys.stderr, flush=True)
        result = FIGURES[name].measure(options)
        record = {
            "core": core_version(),
            "figure": name,
            "command": command.strip(),
            "machine": machine_lines(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "minutes": round((time.time() - started) / 60, 1),
            "repeats": result.pop("rounds", options.rounds),
            "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "result": result,
        }
        (results_dir / f"{name}.json").write_text(redact(json.dumps(record, indent=1)) + "\n")
        print(f">> {name}: done in {record['minutes']} min", file=sys.stderr, flush=True)
    # The notes are about the stored figures: a smoke report (tiny sizes, ours only) goes without them.
    write_report(results_dir, report, FIGURES, notes_dir=None if arguments.smoke else NOTES_DIR)
    print(f">> report: {report}", file=sys.stderr)


if __name__ == "__main__":
    main()
