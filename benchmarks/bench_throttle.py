"""A store with a request-rate limit, read by 2 nodes x 4 ranks x 2 workers at once (issue 39 §1).

The store is the loopback ``ThrottleServer`` of the tests (``tests/support/throttle_proxy.py``): a token
bucket over every request of every node (``--rate`` requests/s, ``--burst``), the rest answered 429,
with ``Retry-After`` or without. Each node reads its own copy of the dataset through its own group, into
its own cache folder; ranks are processes (``tests/simulate/sim_rank.py``, an env-var world), each with
2 DataLoader workers, and train with no step time, so the store's limit is the only brake.

Reported, from the server's own log (arrival times on the machine's monotonic clock):

* whether every rank finished (the loader's verdict on throttling);
* requests refused, over the whole run and once adapted (requests arriving ``--settle`` seconds or
  more after the first one);
* the store's use once adapted: answered requests per second over that window, against ``--rate``;
* the time to the first batch (the latest rank's, from its first iterator) and the whole run.

Run from the repository root: ``.venv/bin/python benchmarks/bench_throttle.py`` (see RESULTS.md for the
exact commands). The same script measures an older tree when copied into it (``--label before``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.sim_runs import run_real, write_dataset  # noqa: E402
from support.throttle_proxy import Throttle, ThrottleServer  # noqa: E402


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="the store's limit, requests/s (all nodes)")
    parser.add_argument("--burst", type=float, default=5.0, help="requests the limit lets through at once")
    parser.add_argument("--retry-after", type=int, default=None, help="seconds a 429 names (default: none)")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=4, help="ranks per node")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank")
    parser.add_argument("--shards", type=int, default=600)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after the first request")
    parser.add_argument("--download-retry", type=int, default=2)
    parser.add_argument("--predownload", type=int, default=64, help="samples each worker reads ahead")
    parser.add_argument("--label", default="after")
    parser.add_argument("--keep", default=None, help="a folder to keep the caches in (default: a temporary one)")
    return parser.parse_args()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    per_shard = 4
    with tempfile.TemporaryDirectory() if args.keep is None else nullcontext(args.keep) as folder:
        root = Path(folder) / "site"
        write_dataset(root / "ds", samples=args.shards * per_shard, per_shard=per_shard, payload=1024)
        limits = Throttle(rate_limit=args.rate, burst=args.burst, retry_after=args.retry_after)
        with ThrottleServer(root, limits) as server:
            started = time.monotonic()
            failure = None
            first_batch = None
            try:
                run = run_real(
                    server,
                    Path(folder) / "cache",
                    nodes=args.nodes,
                    ranks_per_node=args.ranks,
                    workers=args.workers,
                    device_batch=4,
                    epochs=1,
                    dataset={"download_retry": args.download_retry, "predownload": args.predownload},
                    timeout=900,
                )
                first_batch = run.time_to_first_batch
            except AssertionError as error:  # a rank exited non-zero: its stderr's last line says why
                failure = [line for line in str(error).splitlines() if "Error" in line][-1:] or [str(error)[-300:]]
            wall = time.monotonic() - started
            log = list(server.log)
    arrivals = [arrival for arrival, *_ in log]
    first = min(arrivals) if arrivals else 0.0
    last = max(arrivals) if arrivals else 0.0
    adapted = [entry for entry in log if entry[0] >= first + args.settle]
    refused_all = sum(1 for *_, status in log if status == 429)
    refused_adapted = sum(1 for *_, status in adapted if status == 429)
    answered_adapted = sum(1 for *_, status in adapted if status != 429)
    window = max(last - (first + args.settle), 1e-9)
    # The run's tail: once the last shards are on their way, fewer readers ask than the store admits.
    ordered = sorted(arrivals)
    busy_end = ordered[int(0.9 * (len(ordered) - 1))] if ordered else 0.0
    busy = [entry for entry in adapted if entry[0] <= busy_end]
    busy_answered = sum(1 for *_, status in busy if status != 429)
    return {
        "label": args.label,
        "processes": args.nodes * args.ranks * (1 + args.workers),
        "rate_limit": args.rate,
        "retry_after": args.retry_after,
        "finished": failure is None,
        "failure": failure,
        "requests": len(log),
        "refused": refused_all,
        "refused_fraction": refused_all / max(len(log), 1),
        "adapted_requests": len(adapted),
        "adapted_refused_fraction": refused_adapted / max(len(adapted), 1),
        "adapted_use_of_limit": answered_adapted / window / args.rate,
        "adapted_use_before_tail": busy_answered / max(busy_end - (first + args.settle), 1e-9) / args.rate,
        "first_batch_s": first_batch,
        "run_s": wall,
        # Answered and refused requests in each 5 s from the first request.
        "timeline": [
            (
                sum(1 for arrival, *_, status in log if start <= arrival - first < start + 5 and status != 429),
                sum(1 for arrival, *_, status in log if start <= arrival - first < start + 5 and status == 429),
            )
            for start in range(0, int(last - first) + 1, 5)
        ],
    }


def main() -> None:
    result = measure(arguments())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
