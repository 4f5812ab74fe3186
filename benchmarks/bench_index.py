"""Open a dataset whose ``index.json`` lists many shards: time and peak RSS to the first sample.

Usage::

    python benchmarks/bench_index.py --shards 10k 100k 1M [--remote]

The index lists N copies of one small MDS shard's entry (``shard.000000.mds`` ... renamed), and only
the first shard exists on disk: opening the dataset and reading sample 0 (shuffle off) needs only that
one. Each size runs in a fresh process (a cold process: the index is parsed from scratch; the OS page
cache is warm). ``--remote`` opens it through a ``file://`` remote into an empty cache folder, as a
user with the data elsewhere does; without it the folder is read in place.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_order import parse_size, peak_rss_mib

ROOT = Path(__file__).resolve().parent.parent


def make_index(folder: Path, num_shards: int) -> None:
    """A folder with one real 10-sample MDS shard and an ``index.json`` listing ``num_shards`` of them."""
    from stream_plugin import MDSWriter

    with MDSWriter(out=str(folder), columns={"id": "int"}) as writer:
        for sample in range(10):
            writer.write({"id": sample})
    index_path = folder / "index.json"
    document = json.loads(index_path.read_text())
    entry = document["shards"][0]
    shards = []
    for shard in range(num_shards):
        copy = json.loads(json.dumps(entry))
        copy["raw_data"]["basename"] = f"shard.{shard:07d}.mds"
        shards.append(copy)
    (folder / entry["raw_data"]["basename"]).rename(folder / "shard.0000000.mds")
    document["shards"] = shards
    index_path.write_text(json.dumps(document, sort_keys=True))


def open_first_sample(folder: str, remote: bool) -> dict[str, float]:
    """Build the dataset and read its first sample, in this process."""
    from stream_plugin import StreamingDataset

    rss_before = peak_rss_mib()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        if remote:
            dataset = StreamingDataset(remote=f"file://{folder}", local=cache, batch_size=1)
        else:
            dataset = StreamingDataset(local=folder, batch_size=1)
        sample = next(iter(dataset))
        seconds = time.perf_counter() - start
    assert int(sample["id"]) == 0
    return {"seconds": seconds, "peak_rss_mib": peak_rss_mib(), "rss_before_mib": rss_before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", nargs="+", default=["10k", "100k", "1M"])
    parser.add_argument("--remote", action="store_true", help="open through a file:// remote")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: open this folder in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(open_first_sample(args.one, args.remote)))
        return
    print(f"open + first sample, {'file:// remote, empty cache' if args.remote else 'local folder'}")
    print(f"{'shards':>10} {'index MB':>9} {'seconds':>8} {'peak RSS MiB':>13} {'RSS before':>11}")
    for size in args.shards:
        with tempfile.TemporaryDirectory() as root:
            folder = Path(root) / "data"
            make_index(folder, parse_size(size))
            command = [sys.executable, "-m", "benchmarks.bench_index", "--one", str(folder)]
            command += ["--remote"] if args.remote else []
            run = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
            result = json.loads(run.stdout)
            index_mb = (folder / "index.json").stat().st_size / 1e6
            print(
                f"{parse_size(size):>10,} {index_mb:>9.0f} {result['seconds']:>8.2f} "
                f"{result['peak_rss_mib']:>13.0f} {result['rss_before_mib']:>11.0f}"
            )


if __name__ == "__main__":
    main()
