"""Build ``RESULTS.md`` (and its plots) from the stored results of every figure and the notes.

``RESULTS.md`` is generated: edit its sources, never the file. A figure's section comes from its stored
record (``benchmarks/results/<figure>.json``) and its module. What people write about the figures
(analyses, profiles, before-and-after runs) lives in ``benchmarks/notes/``, one Markdown file per note,
named ``<figure>.<n>.<slug>.md``: it follows that figure's section, in the order of ``<n>``, whether or
not the figure has been measured. A note that opens with ``## `` is a section of its own; one that does
not continues the figure's section.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

from stream_plugin.redaction import redact

NOTES_DIR = Path(__file__).resolve().parent / "notes"
INTRO = """\
# Benchmark results

Produced by `./benchmarks/run` (all figures; `./benchmarks/run FIGURE ...` re-measures some and keeps
the others). Each section names the exact command and date that produced it. The harness interleaves
the libraries (each round runs every library once, for every case), repeats each measurement and
reports the median and the spread (min..max). Every measurement runs in a fresh process, after the
library is imported, so imports are never timed and one library's leftovers never slow the next.
The peers environment (`.venv-peers`) is created by the command itself: torch 2.14.1 + torchvision
0.29.1, mosaicml-streaming 0.13.0, litdata 0.2.76, and this package.

"Ours / this" is our throughput over theirs (above 1x: we are faster); for latencies it is their
time over ours (above 1x: we are faster).
"""

FAIRNESS = """\
## What is the same, and what differs

- **Same samples.** `{"id": int, "data": bytes}` with random payloads, written once per library by
  its own writer: ours and MosaicML's `MDSWriter` (byte-identical MDS, 16 MiB `size_limit`; 64 MiB for
  the 16 MiB samples), and litdata's `BinaryWriter` (its own chunk format, the same `chunk_bytes`; its
  files are 0.4% larger). The bare ceiling reads our MDS files.
- **Same loader settings.** `batch_size=256` (16 for the 1 MiB samples, 2 for the 16 MiB ones), the same shuffle flag and worker count, each library's
  own loader (`DataLoader` for the bare ceiling), and one shared `collate_fn` that returns
  `{"id": int64 tensor, "data": list of bytes}`. torch's default collate would turn litdata's
  `memoryview` payloads into one tensor per byte (about 1,500 samples/s), which says nothing about
  litdata's reader.
- **Same cache state.** Warm figures read complete local copies (no remote) that sit in the page
  cache; cold figures start from an empty folder against the same moto S3 server on 127.0.0.1.
- **Shuffle algorithms differ by design.** Ours and MosaicML default to `py1e` (ours: block shuffle),
  `num_canonical_nodes=1` on one node; litdata shuffles chunks and items within a window; the bare
  ceiling takes one full permutation.
- **litdata needs two accommodations.** Its chunk downloader (obstore) refuses `http://` endpoints
  unless `allow_http` is set, which litdata never sets; the harness adds it to litdata's client options
  for the loopback server. For several simulated nodes it only reads `torch.distributed`, so its node
  processes join a gloo group; ours and MosaicML read `RANK` / `WORLD_SIZE` / `LOCAL_WORLD_SIZE`.
- **MosaicML** gets `clean_stale_shared_memory()` before each run (in a fresh process anyway).
- **Reading the 2-worker rows.** A plain `DataLoader` worker hands each batch to the main process by
  pickling it through a pipe, with every tensor in a new shared-memory segment fetched over a socket
  handshake; with `bytes` payloads the pipe caps MosaicML, litdata and the bare ceiling alike.
  `StreamingDataLoader` packs batches in its workers (small tensors inside the pickle, large `bytes`
  lists through reused shared blocks; see the README) and its workers keep freed heap memory for the
  next batch, so our 2-worker rows can pass the bare ceiling's, which uses a plain `DataLoader`. On
  this 2-core machine the two workers also compete with the main process.
- **100 KiB rows move with glibc's malloc.** A batch of 256 x 100 KiB allocates 25 MB of `bytes`;
  whether glibc hands that memory back to the OS between batches (and page-faults it in again) depends
  on the process's allocation history, and moves any library's 0-worker number by up to 2x between
  otherwise identical runs. Pinning `MALLOC_TRIM_THRESHOLD_` and `MALLOC_MMAP_THRESHOLD_` removes it
  (page faults drop from ~135k to ~21k per epoch); the harness leaves the defaults, as users run them.
  Our workers set both for themselves (`stream_plugin/reading/heap.py`); the main process is left alone.
- **The 1 MiB and 16 MiB rows are short.** 128 and 12 samples (every library's copy has to fit the
  bench machine's disk), so a run times 7 and 5 batches after the first: read them as ratios.
- **The loopback server is Python.** moto runs in the harness process on the same 2 cores, so cold
  figures measure client overhead and concurrency more than network speed; the plain boto3 rows share
  the same limits.
"""


def _load(results_dir: Path, name: str) -> dict[str, Any] | None:
    path = results_dir / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _can_plot() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def read_notes(notes_dir: Path, figures: dict[str, ModuleType]) -> dict[str, list[str]]:
    """Each figure's notes, in order: the text of ``notes_dir/<figure>.<n>.<slug>.md`` files."""
    notes: dict[str, list[tuple[int, str]]] = {name: [] for name in figures}
    for path in notes_dir.glob("*.md") if notes_dir.is_dir() else []:
        figure, _, rest = path.name.partition(".")
        order, _, slug = rest.partition(".")
        if figure not in figures or not order.isdigit() or not slug.removesuffix("md").strip("."):
            raise ValueError(
                f"{path}: expected a note named <figure>.<n>.<slug>.md with <figure> one of {list(figures)} and "
                f"<n> a number, found {path.name!r}; rename it (it follows that figure's section in RESULTS.md)"
            )
        notes[figure].append((int(order), path.read_text().strip("\n")))
    return {name: [text for _, text in sorted(found)] for name, found in notes.items()}


def write_report(
    results_dir: Path,
    report: Path,
    figures: dict[str, ModuleType],
    *,
    notes_dir: Path | None = NOTES_DIR,
    plots: bool = True,
) -> None:
    """Write the report of the records in ``results_dir`` to ``report``, each figure's notes after its
    section (none with ``notes_dir=None``: a scratch report of other measurements)."""
    notes = read_notes(notes_dir, figures) if notes_dir is not None else {name: [] for name in figures}
    records = {name: record for name in figures if (record := _load(results_dir, name)) is not None}
    lines = [INTRO]
    if records:
        latest = max(records.values(), key=lambda record: record["date"])
        lines += ["## Machine", "", *latest["machine"], ""]
        loads = [value for record in records.values() for value in record.get("load", [])]
        if loads and max(loads) > 1.0:
            lines += [
                f"The machine was shared with other engineers' test runs during these runs (1-minute load "
                f"average {min(loads):.1f}..{max(loads):.1f} on {latest['machine'][0].split(', ')[1]}), so "
                "absolute numbers move between rounds; the interleaving keeps the ratios steadier than "
                "the absolute values.",
                "",
            ]
    checks = [
        (what, measured, met)
        for name, record in records.items()
        if hasattr(figures[name], "targets")
        for what, measured, met in figures[name].targets(record["result"])
    ]
    if checks:
        lines += ["## Targets", "", "| target | measured | met |", "|---|---|---|"]
        lines += [f"| {what} | {measured} | {'yes' if met else '**no**'} |" for what, measured, met in checks]
        lines.append("")
    for name, module in figures.items():
        record = records.get(name)
        if record is not None:
            lines += _figure_section(module, record, report, plots=plots)
        lines += [line for text in notes[name] for line in (text, "")]
    lines.append(FAIRNESS)
    report.write_text(redact("\n".join(lines)))  # a command or an endpoint may carry a secret: never shown


def _figure_section(module: ModuleType, record: dict[str, Any], report: Path, *, plots: bool) -> list[str]:
    lines = [f"## {module.TITLE}", ""]
    rounds = f"{record['repeats']} round{'s' if record['repeats'] != 1 else ''}"
    lines += [
        f"Command: `{record['command']}` ({record['date']}, core `stream_plugin/` at {record.get('core', 'unknown')}, "
        f"{rounds}, {record['minutes']} min)",
        "",
    ]
    description = getattr(module, "DESCRIPTION", None) or _paragraphs(module.__doc__ or "")
    if description:
        lines += [description, ""]
    if hasattr(module, "plot"):
        picture = report.parent / f"{module.FIGURE}.png"
        if plots and _can_plot():
            module.plot(record["result"], picture)
        if picture.exists():
            lines += [f"![{module.TITLE}]({picture.name})", ""]
    lines += [module.render(record["result"]), ""]
    for title, body in getattr(module, "extra_sections", lambda result: [])(record["result"]):
        lines += [f"### {title}", "", body, ""]
    return lines


def _paragraphs(docstring: str) -> str:
    """A module docstring minus its first line and usage blocks, as report prose."""
    body = docstring.strip().split("\n", 1)[1] if "\n" in docstring.strip() else ""
    kept = [line for line in body.strip().splitlines() if not line.startswith("    ")]
    return "\n".join(kept).replace("Usage::", "").strip()
