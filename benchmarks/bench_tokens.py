"""Token-block throughput: fixed-size blocks read across document boundaries, ours vs litdata's TokensLoader.

The same documents (random int32 token ids, 64 to 4,095 tokens each) are written once per library:
as MDS with one `ndarray:int32` column by our `MDSWriter` (16 MiB shards), and by litdata's
`optimize(..., item_loader=TokensLoader())` (chunks of the same 16 MiB of tokens). Ours reads them
with `StreamingTokenBlockDataset(block_size=2048)` and `StreamingDataLoader`; litdata with
`StreamingDataset(item_loader=TokensLoader(block_size=2049))` and its `StreamingDataLoader`: both
yield 2,049 tokens per block (2,048 inputs plus the label of the last), batch 8, torch's default
collate. Tokens/s counts 2,048 input tokens per block, after the first batch, up to a budget; each
measurement runs in a fresh process from a warm local copy. Differences by design: our blocks overlap
by one token and may span shards, so every token is an input once; litdata's blocks are disjoint and
stop at chunk ends. litdata hands out the stored int32; so does ours with `dtype="stored"` (the row
`stream_plugin`, the ratios' reference), and `stream_plugin (int64)` is ours with its default
`dtype="int64"` (what an embedding and a loss take).
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import median_of, ratio, run_child, spread_of
from benchmarks.libraries import import_library
from benchmarks.options import Options
from benchmarks.workloads import LITDATA, OURS, SHARD_BYTES

FIGURE = "tokens"
TITLE = "Token-block throughput (pre-training blocks across document boundaries)"
BLOCK = 2048
BATCH = 8
VOCAB = 50_257
FULL_DOCUMENTS = 10_000  # about 20M tokens, 80 MB
SMOKE_DOCUMENTS = 60
TOKEN_BUDGET = 10_000_000  # input tokens timed per run (after the first batch)
WORKERS = (0, 2)
SHUFFLES = (False, True)
NODE_RANKS = 8  # the per-node figure: ranks of one node, each with NODE_WORKERS workers, reading at once
NODE_WORKERS = 2
_MARKER = ".benchmark-complete"
OURS_INT64 = f"{OURS} (int64)"  # ours with the default dtype="int64": the same shards and reader


def document(index: int) -> np.ndarray:
    """Document ``index``'s tokens: int32 ids, 64 to 4,095 of them, the same for every library."""
    rng = np.random.default_rng([7, index])
    return rng.integers(0, VOCAB, size=int(rng.integers(64, 4096)), dtype=np.int32)


def documents_for(options: Options) -> int:
    return SMOKE_DOCUMENTS if options.smoke else FULL_DOCUMENTS


def _write_ours(folder: Path, count: int) -> None:
    from stream_plugin import MDSWriter

    with MDSWriter(out=str(folder), columns={"tokens": "ndarray:int32"}, size_limit=SHARD_BYTES) as writer:
        for index in range(count):
            writer.write({"tokens": document(index)})


def litdata_document(index: int) -> Iterator[Any]:
    """litdata's ``optimize`` function: one document as a 1-D tensor (module level, for its workers)."""
    import torch

    yield torch.from_numpy(document(index))


def _write_litdata(folder: Path, count: int) -> None:
    from litdata import TokensLoader, optimize

    tokens_per_chunk = (SHARD_BYTES // 4) // (BLOCK + 1) * (BLOCK + 1)
    optimize(
        fn=litdata_document,
        inputs=list(range(count)),
        output_dir=str(folder),
        chunk_size=tokens_per_chunk,
        item_loader=TokensLoader(),
        num_workers=1,  # one writer keeps the documents in order, as ours
        reorder_files=False,
    )


def prepare(root: Path, count: int, libraries: tuple[str, ...]) -> dict[str, Path]:
    """Write the documents for each library that lacks a finished copy."""
    writers = {OURS: _write_ours, LITDATA: _write_litdata}
    folders = {}
    for library in libraries:
        folder = root / f"tokens-{count}" / ("mds-ours" if library == OURS else "litdata")
        marker = folder / _MARKER
        expected = json.dumps({"documents": count, "shard_bytes": SHARD_BYTES, "block": BLOCK})
        if not (marker.exists() and marker.read_text() == expected):
            shutil.rmtree(folder, ignore_errors=True)
            folder.parent.mkdir(parents=True, exist_ok=True)
            writers[library](folder, count)
            marker.write_text(expected)
        folders[library] = folder
    return folders


def _loader(library: str, local: str, shuffle: bool, num_workers: int) -> Any:
    """The library's loader; on several ranks, each finds its rank in ``RANK`` / ``WORLD_SIZE`` (ours) or
    in the initialised ``torch.distributed`` group (litdata)."""
    if library in (OURS, OURS_INT64):
        from stream_plugin import StreamingDataLoader
        from stream_plugin.text import StreamingTokenBlockDataset

        ours = StreamingTokenBlockDataset(
            local=local,
            block_size=BLOCK,
            batch_size=BATCH,
            shuffle=shuffle,
            num_canonical_nodes=1,
            dtype="int64" if library == OURS_INT64 else "stored",
        )
        return StreamingDataLoader(ours, batch_size=BATCH, num_workers=num_workers)
    from litdata import StreamingDataLoader as LitLoader
    from litdata import StreamingDataset as LitDataset
    from litdata import TokensLoader

    theirs = LitDataset(input_dir=local, item_loader=TokensLoader(block_size=BLOCK + 1), shuffle=shuffle)
    return LitLoader(theirs, batch_size=BATCH, num_workers=num_workers)


def measure_once(library: str, local: str, shuffle: bool, num_workers: int, budget: int) -> dict[str, Any]:
    """One timed pass in this (fresh) process."""
    import_library(OURS if library == OURS_INT64 else library)
    if library in (OURS, OURS_INT64):
        import stream_plugin.text  # noqa: F401  (imported before the timer, as litdata's top level is)

    start = time.perf_counter()
    batches = iter(_loader(library, local, shuffle, num_workers))
    first = next(batches)
    first_batch, cpu = time.perf_counter(), time.process_time()
    tokens = 0
    for batch in batches:
        assert batch.shape[1] == BLOCK + 1, batch.shape
        tokens += batch.shape[0] * BLOCK
        if tokens >= budget:
            break
    end, cpu = time.perf_counter(), time.process_time() - cpu
    del batches
    return {
        "tokens_per_s": tokens / (end - first_batch),
        # This process's CPU per block: with 0 workers all the reading, which a shared machine disturbs less.
        "cpu_us_per_block": cpu / (tokens / BLOCK) * 1e6,
        "tokens": tokens,
        "first_batch_s": first_batch - start,
        "first_block_sum": int(first[0].long().sum()) if not shuffle else None,
    }


def node_rank(
    library: str, local: str, shuffle: bool, num_workers: int, budget: int, rank: int, ranks: int, store: str
) -> dict[str, Any]:
    """One rank of a node (``ranks`` ranks reading at once): its tokens after all ranks had a first
    batch (a barrier of files in ``store``), and when it started and stopped counting (``time.time``)."""
    import_library(library)
    if library == LITDATA:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"file://{store}/gloo", rank=rank, world_size=ranks)
    batches = iter(_loader(library, local, shuffle, num_workers))
    next(batches)
    barrier = Path(store)
    (barrier / f"ready-{rank}").touch()
    while len(list(barrier.glob("ready-*"))) < ranks:
        time.sleep(0.01)
    start = time.time()
    tokens = 0
    for batch in batches:
        tokens += batch.shape[0] * BLOCK
        if tokens >= budget:
            break
    end = time.time()
    del batches
    return {"tokens": tokens, "start": start, "end": end}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def measure_node(library: str, local: str, shuffle: bool, budget: int) -> dict[str, Any]:
    """``NODE_RANKS`` ranks x ``NODE_WORKERS`` workers of one node reading the same local copy at once:
    the node's tokens/s (all ranks' tokens over the span from the first start to the last stop)."""
    store = tempfile.mkdtemp(prefix="bench-tokens-node-")
    port = str(_free_port())

    def rank(index: int) -> dict[str, Any]:
        layout = {
            "RANK": str(index),
            "WORLD_SIZE": str(NODE_RANKS),
            "LOCAL_RANK": str(index),
            "LOCAL_WORLD_SIZE": str(NODE_RANKS),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        result: dict[str, Any] = run_child(
            "benchmarks.bench_tokens:node_rank",
            env=layout,
            library=library,
            local=local,
            shuffle=shuffle,
            num_workers=NODE_WORKERS,
            budget=budget // NODE_RANKS,
            rank=index,
            ranks=NODE_RANKS,
            store=store,
        )
        return result

    try:
        with ThreadPoolExecutor(NODE_RANKS) as pool:
            ranks = list(pool.map(rank, range(NODE_RANKS)))
    finally:
        shutil.rmtree(store, ignore_errors=True)
    tokens = sum(result["tokens"] for result in ranks)
    span = max(result["end"] for result in ranks) - min(result["start"] for result in ranks)
    return {"tokens_per_s": tokens / span, "tokens": tokens}


def count_once(local: str) -> dict[str, Any]:
    """Build our dataset on a folder without saved token counts: the once-per-node counting pass."""
    import_library(OURS)
    from stream_plugin.text import StreamingTokenBlockDataset

    start = time.perf_counter()
    StreamingTokenBlockDataset(local=local, block_size=BLOCK, batch_size=BATCH)
    return {"seconds": time.perf_counter() - start}


def measure(options: Options) -> dict[str, Any]:
    libraries = (OURS,) if options.smoke else (OURS, OURS_INT64, LITDATA)
    count = documents_for(options)
    folders = prepare(
        options.data_root, count, tuple(library for library in libraries if library != OURS_INT64)
    )
    folders[OURS_INT64] = folders[OURS]
    shutil.rmtree(folders[OURS] / ".stream_plugin" / "token-counts", ignore_errors=True)
    counting = run_child("benchmarks.bench_tokens:count_once", local=str(folders[OURS]))["seconds"]
    total = sum(len(document(index)) for index in range(count))
    budget = min(TOKEN_BUDGET, total // 2)
    shuffles = (True,) if options.smoke else SHUFFLES
    runs: dict[tuple[bool, int, str], list[dict[str, Any]]] = {}
    nodes: dict[str, list[dict[str, Any]]] = {}
    for _ in range(options.rounds):
        for shuffle in shuffles:
            for workers in WORKERS:
                for library in libraries:
                    result = run_child(
                        "benchmarks.bench_tokens:measure_once",
                        library=library,
                        local=str(folders[library]),
                        shuffle=shuffle,
                        num_workers=workers,
                        budget=budget,
                    )
                    runs.setdefault((shuffle, workers, library), []).append(result)
        if not options.smoke:
            for library in (OURS, LITDATA):
                node = measure_node(library, str(folders[library]), True, budget)
                nodes.setdefault(library, []).append(node)
    rows = [
        {"shuffle": shuffle, "workers": workers, "library": library, "runs": results}
        for (shuffle, workers, library), results in runs.items()
    ]
    return {
        "rows": rows,
        "documents": count,
        "tokens": total,
        "budget": budget,
        "counting_s": counting,
        "node": [{"library": library, "runs": results} for library, results in nodes.items()],
    }


def render(result: dict[str, Any]) -> str:
    rows = result["rows"]
    speed = {
        (row["shuffle"], row["workers"], row["library"]): median_of(
            [run["tokens_per_s"] for run in row["runs"]]
        )
        for row in rows
    }
    lines = [
        f"{result['documents']:,} documents, {result['tokens']:,} tokens; {result['budget']:,} input tokens "
        f"timed per run; block {BLOCK} (+1), batch {BATCH}. Counting the tokens of every document once "
        f"(our first dataset on a node, then cached; not in the rows below): {result.get('counting_s', 0):.3f} s.",
        "",
        "| shuffle | workers | library | tokens/s (median) | spread | first batch s | ours / this "
        "| CPU µs per block (0 workers) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        values = [run["tokens_per_s"] for run in row["runs"]]
        ours = speed.get((row["shuffle"], row["workers"], OURS), 0.0)
        first = median_of([run["first_batch_s"] for run in row["runs"]])
        lines.append(
            f"| {'on' if row['shuffle'] else 'off'} | {row['workers']} | {row['library']} | "
            f"{median_of(values):,.0f} | {spread_of(values)} | {first:.2f} | {ratio(ours, median_of(values))} "
            f"| {_cpu_cell(row)} |"
        )
    lines.extend(_render_node(result.get("node", [])))
    return "\n".join(lines)


def _cpu_cell(row: dict[str, Any]) -> str:
    """Median and spread of the CPU per block of a 0-worker row (runs before this field: blank)."""
    values = [run["cpu_us_per_block"] for run in row["runs"] if "cpu_us_per_block" in run]
    if row["workers"] or not values:
        return ""
    return f"{median_of(values):.1f} ({min(values):.1f}..{max(values):.1f})"


def _render_node(node: list[dict[str, Any]]) -> list[str]:
    """The per-node table: ``NODE_RANKS`` ranks x ``NODE_WORKERS`` workers, shuffled, tokens/s of the node."""
    if not node:
        return []
    speed = {row["library"]: median_of([run["tokens_per_s"] for run in row["runs"]]) for row in node}
    lines = [
        "",
        f"One node: {NODE_RANKS} ranks x {NODE_WORKERS} workers reading the same local copy at once, shuffled "
        f"(each rank a fresh process; {NODE_RANKS} x its share of the budget, timed from when every rank had "
        "its first batch to the last rank's end):",
        "",
        "| library | node tokens/s (median) | spread | ours / this |",
        "|---|---|---|---|",
    ]
    for row in node:
        values = [run["tokens_per_s"] for run in row["runs"]]
        lines.append(
            f"| {row['library']} | {median_of(values):,.0f} | {spread_of(values)} | "
            f"{ratio(speed.get(OURS, 0.0), median_of(values))} |"
        )
    return lines


def plot(result: dict[str, Any], path: Path) -> None:
    """Median tokens/s per cell (shuffle x workers) and of the node, one bar per library, spread as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = sorted({(row["shuffle"], row["workers"]) for row in result["rows"]})
    groups: list[tuple[str, dict[str, list[float]]]] = []  # (label, library -> tokens/s of each run)
    for shuffle, workers in cells:
        values: dict[str, list[float]] = {}
        for row in result["rows"]:
            if (row["shuffle"], row["workers"]) == (shuffle, workers):
                values.setdefault(row["library"], []).extend(run["tokens_per_s"] for run in row["runs"])
        groups.append((f"shuffle {'on' if shuffle else 'off'}, {workers} workers", values))
    node = result.get("node", [])
    if node:
        values = {row["library"]: [run["tokens_per_s"] for run in row["runs"]] for row in node}
        groups.append((f"node: {NODE_RANKS} ranks x {NODE_WORKERS} workers,\nshuffle on", values))
    libraries = list(dict.fromkeys(row["library"] for row in result["rows"]))
    colors = {OURS: "C0", OURS_INT64: "C9", LITDATA: "C2"}  # C0 / C2 as in the iteration plot
    width = 0.8 / max(1, len(libraries))
    figure, axis = plt.subplots(figsize=(10, 4))
    for position, library in enumerate(libraries):
        medians, lows, highs = [], [], []
        for _, per_library in groups:
            runs = [value / 1e6 for value in per_library.get(library, [])]
            middle = median_of(runs) if runs else 0.0
            medians.append(middle)
            lows.append(middle - min(runs, default=middle))
            highs.append(max(runs, default=middle) - middle)
        axis.bar(
            [index + (position - (len(libraries) - 1) / 2) * width for index in range(len(groups))],
            medians,
            width,
            yerr=[lows, highs],
            capsize=3,
            color=colors.get(library, "C3"),
            label=library,
        )
    axis.set_xticks(range(len(groups)))
    axis.set_xticklabels([label for label, _ in groups], fontsize=8)
    axis.set_ylabel("million input tokens/s (median, bars: spread)")
    axis.set_title(
        f"Token blocks of {BLOCK} (+1), batch {BATCH}: one process and its workers, and one node", fontsize=10
    )
    axis.grid(axis="y", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
