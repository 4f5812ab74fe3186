"""Parquet read throughput: ours over a Parquet index, ours over the same rows as MDS, litdata's Parquet path.

The same rows (``id`` int64, ``text`` of about 100 characters, ``label`` int64) are written once as
8 Parquet files of row groups of 5,000 rows (pyarrow's defaults, snappy), and once as MDS by our
``MDSWriter`` (16 MiB shards). Ours indexes the Parquet files with ``index_parquet`` (16 MiB shards)
and reads each folder in place (``StreamingDataset(local=...)``); litdata indexes its own copy of the
files with ``index_parquet_dataset`` and reads it with ``StreamingDataset(item_loader=ParquetLoader())``
(its default ``low_memory=True``). Batch 64, torch's default collate, each library's own
``StreamingDataLoader``. Rows/s counts the rows after the first batch, up to a budget; each
measurement runs in a fresh process. Also: the time to index 1,000 small files (ours, and litdata's
``index_parquet_dataset`` with its default 4 threads), and the bytes our node cache downloads against
the byte ranges of the shards (all columns, and ``columns=["id"]``) and the files' size.

litdata's Parquet path needs polars; without it (``pip install polars`` in ``.venv-peers``) its rows
say "skipped".
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.common import median_of, ratio, run_child, spread_of
from benchmarks.libraries import import_library
from benchmarks.options import Options
from benchmarks.workloads import LITDATA, OURS, SHARD_BYTES

FIGURE = "parquet"
TITLE = "Parquet read throughput (ours over a Parquet index, ours over MDS, litdata's Parquet path)"
FULL_ROWS = 400_000
SMOKE_ROWS = 4_000
FILES = 8
ROW_GROUP = 5_000
BATCH = 64
ROW_BUDGET = 300_000
INDEX_FILES = 1_000
WORKERS = (0, 2)
SHUFFLES = (False, True)
OURS_PARQUET = f"{OURS} (Parquet)"
OURS_MDS = f"{OURS} (MDS)"
LITDATA_PARQUET = f"{LITDATA} (Parquet)"
_MARKER = ".benchmark-complete"


def _columns(start: int, stop: int) -> dict[str, Any]:
    import numpy as np

    ids = np.arange(start, stop, dtype=np.int64)
    return {
        "id": ids,
        "text": [f"row {i:09d} " + "lorem ipsum dolor sit amet " * 3 for i in ids.tolist()],
        "label": ids % 10,
    }


def _write_parquet(folder: Path, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    per_file = rows // FILES
    for number in range(FILES):
        table = pa.table(_columns(number * per_file, (number + 1) * per_file))
        pq.write_table(table, folder / f"part-{number:03d}.parquet", row_group_size=ROW_GROUP)


def _write_mds(folder: Path, rows: int) -> None:
    from stream_plugin import MDSWriter

    columns = _columns(0, rows)
    with MDSWriter(out=str(folder), columns={"id": "int64", "text": "str", "label": "int64"}, size_limit=SHARD_BYTES) as writer:
        for index in range(rows):
            writer.write({name: values[index] for name, values in columns.items()})


def prepare(root: Path, rows: int, libraries: tuple[str, ...]) -> dict[str, Path]:
    """Write each library's copy of the rows once (kept between runs under a marker)."""
    folders: dict[str, Path] = {}
    base = root / f"parquet-{rows}"
    for library in libraries:
        folder = base / {OURS_PARQUET: "parquet-ours", OURS_MDS: "mds-ours", LITDATA_PARQUET: "parquet-litdata"}[library]
        marker = base / f"{folder.name}{_MARKER}"
        expected = json.dumps({"rows": rows, "files": FILES, "row_group": ROW_GROUP, "shard_bytes": SHARD_BYTES})
        if not (marker.exists() and marker.read_text() == expected):
            shutil.rmtree(folder, ignore_errors=True)
            base.mkdir(parents=True, exist_ok=True)
            if library == OURS_MDS:
                _write_mds(folder, rows)
            else:
                _write_parquet(folder, rows)
                if library == OURS_PARQUET:
                    from stream_plugin.parquet import index_parquet

                    index_parquet(folder, shard_bytes=SHARD_BYTES)
            marker.write_text(expected)
        folders[library] = folder
    return folders


def _loader(library: str, folder: str, shuffle: bool, num_workers: int) -> Any:
    if library in (OURS_PARQUET, OURS_MDS):
        from stream_plugin import StreamingDataLoader, StreamingDataset

        ours = StreamingDataset(local=folder, batch_size=BATCH, shuffle=shuffle, num_canonical_nodes=1)
        return StreamingDataLoader(ours, batch_size=BATCH, num_workers=num_workers)
    from litdata import StreamingDataLoader as LitLoader
    from litdata import StreamingDataset as LitDataset
    from litdata.streaming.item_loader import ParquetLoader

    theirs = LitDataset(input_dir=folder, item_loader=ParquetLoader(), shuffle=shuffle)
    # litdata refuses fork with its ParquetLoader (polars' thread pool deadlocks in a forked worker,
    # litdata issue 823) and asks for spawn; workers start before the first batch, which is not timed.
    context = {"multiprocessing_context": "spawn"} if num_workers else {}
    return LitLoader(theirs, batch_size=BATCH, num_workers=num_workers, **context)


def _litdata_ready() -> str | None:
    """Why litdata's Parquet path cannot run here, or None."""
    try:
        import litdata  # noqa: F401
        import polars  # noqa: F401
    except ImportError as error:
        return f"{error}: run under .venv-peers, with polars installed"
    return None


def index_litdata(folder: str) -> dict[str, Any]:
    """litdata's own index of its copy of the files (written beside them, as ours)."""
    reason = _litdata_ready()
    if reason is not None:
        return {"skipped": reason}
    from litdata import index_parquet_dataset

    if not (Path(folder) / "index.json").exists():
        index_parquet_dataset(folder)
    return {}


def measure_once(library: str, folder: str, shuffle: bool, num_workers: int, budget: int) -> dict[str, Any]:
    """One timed pass in this (fresh) process."""
    if library == LITDATA_PARQUET:
        reason = _litdata_ready()
        if reason is not None:
            return {"skipped": reason}
    import_library(OURS if library != LITDATA_PARQUET else LITDATA)
    if library == OURS_PARQUET:
        import stream_plugin.parquet.reader  # noqa: F401  (pyarrow, imported before the timer as litdata's is)
    start = time.perf_counter()
    batches = iter(_loader(library, folder, shuffle, num_workers))
    next(batches)
    first_batch = time.perf_counter()
    rows = 0
    for batch in batches:
        rows += len(batch["id"])
        if rows >= budget:
            break
    end = time.perf_counter()
    del batches
    return {"rows_per_s": rows / (end - first_batch), "rows": rows, "first_batch_s": first_batch - start}


def index_many(local: str, files: int) -> dict[str, Any]:
    """Seconds to index ``files`` small Parquet files (ours), and litdata's index of the same files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stream_plugin.parquet import index_parquet

    ours, theirs = Path(local) / "ours", Path(local) / "litdata"
    for folder in (ours, theirs):
        folder.mkdir()
        for number in range(files):
            pq.write_table(pa.table(_columns(number * 100, (number + 1) * 100)), folder / f"f{number:05d}.parquet")
    start = time.perf_counter()
    index_parquet(ours)
    result: dict[str, Any] = {"ours_s": time.perf_counter() - start}
    if _litdata_ready() is None:
        from litdata import index_parquet_dataset

        start = time.perf_counter()
        index_parquet_dataset(str(theirs))
        result["litdata_s"] = time.perf_counter() - start
    return result


def downloaded_bytes(folder: str, local: str) -> dict[str, Any]:
    """What our node cache downloads for a whole epoch (all columns, then ``id`` only) from ``folder``."""
    from stream_plugin import StreamingDataset

    shards = json.loads((Path(folder) / "index.json").read_text())["shards"]
    result: dict[str, Any] = {
        "file_bytes": sum(path.stat().st_size for path in Path(folder).glob("*.parquet")),
    }
    for name, columns in (("all", None), ("id", ["id"])):
        dataset = StreamingDataset(
            remote=folder, local=os.path.join(local, name), batch_size=BATCH, columns=columns
        )
        for _ in dataset:
            pass
        ranges = sum(
            shard["parquet"]["footer_bytes"]
            + sum(size for column, size in shard["parquet"]["column_bytes"].items() if columns is None or column in columns)
            for shard in shards
        )
        result[name] = {"downloaded": dataset.node_stats().bytes_downloaded, "ranges": ranges}
    return result


def measure(options: Options) -> dict[str, Any]:
    libraries = (OURS_PARQUET, OURS_MDS) if options.smoke else (OURS_PARQUET, OURS_MDS, LITDATA_PARQUET)
    rows = SMOKE_ROWS if options.smoke else FULL_ROWS
    folders = prepare(options.data_root, rows, libraries)
    if LITDATA_PARQUET in folders:
        run_child("benchmarks.bench_parquet:index_litdata", folder=str(folders[LITDATA_PARQUET]))
    budget = min(ROW_BUDGET, rows // 2)
    shuffles = (True,) if options.smoke else SHUFFLES
    runs: dict[tuple[bool, int, str], list[dict[str, Any]]] = {}
    for _ in range(options.rounds):
        for shuffle in shuffles:
            for workers in (0,) if options.smoke else WORKERS:
                for library in libraries:
                    result = run_child(
                        "benchmarks.bench_parquet:measure_once",
                        library=library,
                        folder=str(folders[library]),
                        shuffle=shuffle,
                        num_workers=workers,
                        budget=budget,
                    )
                    runs.setdefault((shuffle, workers, library), []).append(result)
    indexing = run_child(
        "benchmarks.bench_parquet:index_many", files=50 if options.smoke else INDEX_FILES, scratch=True
    )
    egress = run_child("benchmarks.bench_parquet:downloaded_bytes", folder=str(folders[OURS_PARQUET]), scratch=True)
    return {
        "rows": [
            {"shuffle": shuffle, "workers": workers, "library": library, "runs": results}
            for (shuffle, workers, library), results in runs.items()
        ],
        "total_rows": rows,
        "budget": budget,
        "indexing": indexing,
        "index_files": 50 if options.smoke else INDEX_FILES,
        "egress": egress,
    }


def render(result: dict[str, Any]) -> str:
    timed = [row for row in result["rows"] if all("rows_per_s" in run for run in row["runs"])]
    speed = {
        (row["shuffle"], row["workers"], row["library"]): median_of([run["rows_per_s"] for run in row["runs"]])
        for row in timed
    }
    lines = [
        f"{result['total_rows']:,} rows in {FILES} files; {result['budget']:,} rows timed per run; batch {BATCH}.",
        "",
        "| shuffle | workers | library | rows/s (median) | spread | first batch s | ours (Parquet) / this |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        cells = f"| {'on' if row['shuffle'] else 'off'} | {row['workers']} | {row['library']} |"
        skipped = next((run["skipped"] for run in row["runs"] if "skipped" in run), None)
        if skipped is not None:
            lines.append(f"{cells} skipped: {skipped} | | | |")
            continue
        values = [run["rows_per_s"] for run in row["runs"]]
        ours = speed.get((row["shuffle"], row["workers"], OURS_PARQUET), 0.0)
        first = median_of([run["first_batch_s"] for run in row["runs"]])
        lines.append(
            f"{cells} {median_of(values):,.0f} | {spread_of(values)} | {first:.2f} | {ratio(ours, median_of(values))} |"
        )
    indexing = result["indexing"]
    theirs = f", litdata's index_parquet_dataset {indexing['litdata_s']:.2f} s" if "litdata_s" in indexing else ""
    lines += ["", f"Indexing {result['index_files']:,} small files: ours {indexing['ours_s']:.2f} s{theirs}.", ""]
    egress = result["egress"]
    lines.append(f"Bytes our node cache downloaded for one epoch (the files hold {egress['file_bytes']:,}):")
    lines.append("")
    lines.append("| columns | downloaded | byte ranges of the shards (chunks + footers) |")
    lines.append("|---|---|---|")
    for name in ("all", "id"):
        lines.append(f"| {name} | {egress[name]['downloaded']:,} | {egress[name]['ranges']:,} |")
    return "\n".join(lines)
