"""Time and peak memory of ``plan_epoch`` (one epoch's global order) for large single-stream datasets.

Usage::

    python benchmarks/bench_order.py --sizes 1M 10M 100M [--algo block] [--nodes 8] [--batch 256]

Each size runs in a fresh subprocess so its peak RSS (``resource.getrusage``) is its own. The
reported peak includes the input (the sampler's int64 chosen ids) and the (T, G) int64 output.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

_SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9}


def parse_size(text: str) -> int:
    """``'10M'`` -> 10_000_000."""
    if text[-1] in _SUFFIX:
        return int(float(text[:-1]) * _SUFFIX[text[-1]])
    return int(text)


def run_one(num_samples: int, algo: str, nodes: int, batch: int, shards: int) -> dict[str, float]:
    """Plan one epoch in this process and measure it."""
    import numpy as np

    from stream_plugin.order.layout import DatasetShape
    from stream_plugin.order.plan import OrderConfig, plan_epoch

    per_shard = -(-num_samples // shards)
    sizes = np.full(shards, per_shard, dtype=np.int64)
    sizes[-1] = num_samples - per_shard * (shards - 1)
    shape = DatasetShape(sizes, np.zeros(shards, dtype=np.int64))
    chosen = [np.arange(num_samples, dtype=np.int64)]  # what the sampler hands over: sorted int64 ids
    config = OrderConfig(
        shuffle=algo != "none",
        shuffle_algo=algo,
        num_canonical_nodes=nodes,
        global_batch_size=batch,
    )
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    order = plan_epoch(shape, chosen, config, epoch=1)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux -> MiB
    assert order.num_samples == num_samples
    return {"samples": num_samples, "seconds": seconds, "peak_rss_mib": peak, "rss_before_mib": rss_before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["1M", "10M", "100M"])
    parser.add_argument("--algo", default="block", help="shuffle_algo (none, permute, block, intra_shard)")
    parser.add_argument("--nodes", type=int, default=8, help="num_canonical_nodes")
    parser.add_argument("--batch", type=int, default=256, help="global batch size")
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run a single size in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(parse_size(args.one), args.algo, args.nodes, args.batch, args.shards)))
        return
    print(f"plan_epoch, shuffle_algo={args.algo}, C={args.nodes}, G={args.batch}, {args.shards} shards")
    print(f"{'samples':>12} {'seconds':>8} {'peak RSS MiB':>13} {'RSS before':>11}")
    for size in args.sizes:
        command = [sys.executable, __file__, "--one", size, "--algo", args.algo]
        command += ["--nodes", str(args.nodes), "--batch", str(args.batch), "--shards", str(args.shards)]
        result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        print(
            f"{result['samples']:>12,} {result['seconds']:>8.2f} {result['peak_rss_mib']:>13.0f} "
            f"{result['rss_before_mib']:>11.0f}"
        )


if __name__ == "__main__":
    main()
