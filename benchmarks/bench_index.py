"""Open a dataset whose ``index.json`` lists many shards: time and peak RSS to the first sample.

Usage::

    python benchmarks/bench_index.py --shards 10k 100k 1M [--library ours mosaicml] [--ranks 8] [--shuffle]

The index lists N copies of one small MDS shard's entry (``shard.000000.mds`` ... renamed). Without
``--shuffle`` only the first shard exists on disk: opening the dataset and reading sample 0 (shuffle
off, MosaicML's default) needs only that one. With ``--shuffle`` the datasets are opened with
``shuffle=True``, as training opens them, and every shard file exists (hard links to a few copies of
the one shard), so each rank reads its first sample from whichever shard the order puts first.
Every measurement is a fresh process, with the OS page cache warm (the machine is shared: CPU seconds
vary less than wall), in these situations:

* ``local cold`` / ``local warm``: the folder read in place, before and after a first open kept the
  parsed index (ours keeps it in the user's cache, ``~/.cache/stream_plugin/``, removed for the cold run);
* ``remote cold`` / ``remote warm``: through a ``file://`` remote (MosaicML: the plain path) into an
  empty cache folder, then again into the same cache folder;
* ``R ranks local cold`` / ``local warm`` / ``remote cold``: R processes of one node (``RANK`` /
  ``LOCAL_WORLD_SIZE``) open it at once (the remote into one empty cache folder), their clocks started
  together once all have imported; the slowest rank's time and the largest peak RSS are shown. Ours
  only: MosaicML's ranks need a ``torch.distributed`` group.

Run under ``.venv-peers`` to measure MosaicML Streaming 0.13 in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_order import parse_size, peak_rss_mib

ROOT = Path(__file__).resolve().parent.parent
OURS, MOSAICML = "ours", "mosaicml"
CHILD_TIMEOUT = 1800


LINKS_PER_FILE = 60_000  # ext4 allows 65,000 hard links to one file


def make_index(folder: Path, num_shards: int, *, every_file: bool = False) -> None:
    """A folder with one real 10-sample MDS shard and an ``index.json`` listing ``num_shards`` of them;
    with ``every_file``, a file for each of them too (hard links to copies of the one shard)."""
    from stream_plugin import MDSWriter

    with MDSWriter(out=str(folder), columns={"id": "int"}) as writer:
        for sample in range(10):
            writer.write({"id": sample})
    index_path = folder / "index.json"
    document = json.loads(index_path.read_text())
    entry = document["shards"][0]
    (folder / entry["raw_data"]["basename"]).rename(folder / "shard.0000000.mds")
    entry["raw_data"]["basename"] = "@@NAME@@"
    template = json.dumps(entry, sort_keys=True)
    entries = ", ".join(template.replace("@@NAME@@", f"shard.{shard:07d}.mds") for shard in range(num_shards))
    index_path.write_text('{"shards": [' + entries + '], "version": 2}')
    if every_file:
        first = folder / "shard.0000000.mds"
        for shard in range(1, num_shards):
            source = folder / f"links.{shard // LINKS_PER_FILE}.mds"
            if shard % LINKS_PER_FILE == 0 or shard == 1:
                shutil.copyfile(first, source)
            os.link(source, folder / f"shard.{shard:07d}.mds")
        os.sync()  # a million new links: write them back now, not while the opens are timed


def open_first_sample(
    folder: str, cache: str | None, library: str, *, shuffle: bool = False, wait_for_go: bool = False
) -> dict[str, float]:
    """Build the dataset and read its first sample, in this process (after the imports, and with
    ``wait_for_go`` once the parent says go on standard input: ranks start their clocks together)."""
    if library == MOSAICML:
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
        remote = folder
    else:
        from stream_plugin import StreamingDataset  # type: ignore[assignment]

        remote = f"file://{folder}"
    if wait_for_go:
        print("ready", flush=True)
        sys.stdin.readline()
    rss_before = peak_rss_mib()
    start, cpu_start = time.perf_counter(), time.process_time()
    if cache is not None:
        dataset = StreamingDataset(remote=remote, local=cache, batch_size=1, shuffle=shuffle)
    else:
        dataset = StreamingDataset(local=folder, batch_size=1, shuffle=shuffle)
    sample = next(iter(dataset))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    assert 0 <= int(sample["id"]) < 10  # every shard holds ids 0..9
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "peak_rss_mib": peak_rss_mib(),
        "rss_before_mib": rss_before,
    }


def _command(folder: Path, cache: Path | None, library: str, shuffle: bool) -> list[str]:
    command = [sys.executable, "-m", "benchmarks.bench_index", "--one", str(folder), "--library", library]
    return (
        command + (["--cache", str(cache)] if cache is not None else []) + (["--shuffle"] if shuffle else [])
    )


def _run(folder: Path, cache: Path | None, library: str, shuffle: bool) -> dict[str, float]:
    run = subprocess.run(
        _command(folder, cache, library, shuffle),
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=CHILD_TIMEOUT,
    )
    return json.loads(run.stdout.strip().splitlines()[-1])


def _run_ranks(folder: Path, cache: Path | None, ranks: int, shuffle: bool) -> dict[str, float]:
    """``ranks`` processes of one node open the dataset at once; the slowest and the largest.

    Each rank imports first and then waits for the others: their clocks start together, as on a node
    whose ranks import side by side on cores of their own (here, 8 imports of torch would otherwise
    compete for 2 cores with the first rank's parse).
    """
    children = []
    for rank in range(ranks):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(ranks), "LOCAL_WORLD_SIZE": str(ranks)}
        children.append(
            subprocess.Popen(
                [*_command(folder, cache, OURS, shuffle), "--wait-for-go"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env=env,
            )
        )
    for child in children:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("a rank did not get ready")
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    results = []
    for child in children:
        output, _ = child.communicate(timeout=CHILD_TIMEOUT)
        if child.returncode:
            raise RuntimeError(f"rank exited with {child.returncode}")
        results.append(json.loads(output.strip().splitlines()[-1]))
    return {
        "seconds": max(result["seconds"] for result in results),
        "cpu_seconds": max(result["cpu_seconds"] for result in results),
        "peak_rss_mib": max(result["peak_rss_mib"] for result in results),
        "rss_before_mib": max(result["rss_before_mib"] for result in results),
    }


def _forget_parse(folder: Path) -> None:
    from stream_plugin.cache.locks import kept_index_folder

    shutil.rmtree(kept_index_folder(folder).root, ignore_errors=True)


def measure(
    folder: Path, root: Path, library: str, ranks: int, *, shuffle: bool = False
) -> list[tuple[str, dict[str, float]]]:
    """Every situation of the module docstring, in order, for one library."""
    rows: list[tuple[str, dict[str, float]]] = []
    _forget_parse(folder)
    rows.append(("local cold", _run(folder, None, library, shuffle)))
    rows.append(("local warm", _run(folder, None, library, shuffle)))
    cache = Path(tempfile.mkdtemp(dir=root))
    rows.append(("remote cold", _run(folder, cache, library, shuffle)))
    rows.append(("remote warm", _run(folder, cache, library, shuffle)))
    if library == OURS and ranks > 1:
        _forget_parse(folder)
        rows.append((f"{ranks} ranks local cold", _run_ranks(folder, None, ranks, shuffle)))
        rows.append((f"{ranks} ranks local warm", _run_ranks(folder, None, ranks, shuffle)))
        cache = Path(tempfile.mkdtemp(dir=root))
        rows.append((f"{ranks} ranks remote cold", _run_ranks(folder, cache, ranks, shuffle)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", nargs="+", default=["10k", "100k", "1M"])
    parser.add_argument("--library", nargs="+", default=[OURS], choices=[OURS, MOSAICML])
    parser.add_argument("--ranks", type=int, default=8, help="processes of one node opening at once (ours)")
    parser.add_argument(
        "--shuffle",
        action="store_true",
        help="open with shuffle=True (every shard file present; slower to set up)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: open this folder in this process
    parser.add_argument("--cache", help=argparse.SUPPRESS)  # internal: through a remote into this cache
    parser.add_argument("--wait-for-go", action="store_true", help=argparse.SUPPRESS)  # internal: a rank
    args = parser.parse_args()
    if args.one:
        print(
            json.dumps(
                open_first_sample(
                    args.one, args.cache, args.library[0], shuffle=args.shuffle, wait_for_go=args.wait_for_go
                )
            )
        )
        return
    print(
        f"shuffle={args.shuffle}: open + first sample (wall and CPU seconds, peak RSS MiB of the whole process"
    )
    print("and before the open;")
    print("for R ranks: the slowest and the largest of the ranks)")
    print(
        f"{'shards':>10} {'index MB':>9} {'library':>9} {'situation':>22} {'seconds':>8} {'CPU s':>7} "
        f"{'peak RSS':>9} {'before':>7}"
    )
    for size in args.shards:
        with tempfile.TemporaryDirectory() as name:
            root = Path(name)
            folder = root / "data"
            make_index(folder, parse_size(size), every_file=args.shuffle)
            index_mb = (folder / "index.json").stat().st_size / 1e6
            for library in args.library:
                for situation, result in measure(folder, root, library, args.ranks, shuffle=args.shuffle):
                    print(
                        f"{parse_size(size):>10,} {index_mb:>9.0f} {library:>9} {situation:>22} "
                        f"{result['seconds']:>8.3f} {result['cpu_seconds']:>7.3f} {result['peak_rss_mib']:>9.0f} "
                        f"{result['rss_before_mib']:>7.0f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
