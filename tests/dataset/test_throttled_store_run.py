"""A real multi-process run through a store that throttles completes: 2 nodes x 2 ranks x 2 workers.

Each node reads through its own group of a loopback server that admits a few requests a second (all
groups together) and answers the rest 429 with ``Retry-After``. ``download_retry=0``: any failed attempt
would fail the run, so finishing means no refusal was counted as one. Before issue 39 the ranks raised
``RetriesExhaustedError`` here.
"""

from __future__ import annotations

from pathlib import Path

from support.sim_runs import run_real, write_dataset
from support.throttle_proxy import Throttle, ThrottleServer

SAMPLES = 96


def test_a_run_through_a_throttling_store_completes_with_every_sample_once(tmp_path: Path) -> None:
    root = tmp_path / "site"
    write_dataset(root / "ds", samples=SAMPLES, per_shard=8, payload=512)
    limits = Throttle(rate_limit=4.0, burst=2.0, retry_after=1)
    with ThrottleServer(root, limits) as server:
        run = run_real(
            server,
            tmp_path / "cache",
            nodes=2,
            ranks_per_node=2,
            workers=2,
            device_batch=4,
            epochs=1,
            dataset={"download_retry": 0},
            timeout=300,
        )
        refused = len(server.refusals)
        answered = [(group, path) for _, group, method, path, status in server.log if method == "GET" and status == 200]
    print(f"{refused} request(s) refused 429, {len(answered)} GETs answered")
    assert refused > 0, "the premise: 8 processes starting at once outran 4 requests a second"
    seen = sorted(sample for rank in run.batches for batch in rank for sample in batch)
    assert seen == list(range(SAMPLES))
    assert len(answered) == len(set(answered))  # each node downloaded each file once, however often refused
