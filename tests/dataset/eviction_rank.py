"""One rank of the eviction runs (tests/dataset/test_eviction_run.py): read epochs in lockstep, print batches.

Run with RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / MASTER_ADDR / MASTER_PORT set. The ranks
meet at a gloo barrier after every batch, as training's all-reduce makes them. Prints one JSON object:
the sample ids of every batch this rank took, in order, and the most bytes of placed shard files the
cache folder held after any batch.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch.distributed as dist

from stream_plugin import StreamingDataLoader, StreamingDataset


def cached_bytes(local: Path) -> int:
    """Bytes of the placed shard files in ``local`` now (a file evicted while listed counts as gone)."""
    total = 0
    for path in local.glob("shard.*"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--remote", required=True)
    parser.add_argument("--local", required=True)
    parser.add_argument("--device-batch", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--block", type=int, required=True)
    parser.add_argument("--cache-limit", type=int, required=True)
    parser.add_argument("--eviction", required=True)
    parser.add_argument("--predownload", type=int, default=None)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    dataset = StreamingDataset(
        remote=args.remote,
        local=args.local,
        batch_size=args.device_batch,
        shuffle=True,
        shuffle_block_size=args.block,
        cache_limit=args.cache_limit,
        eviction=args.eviction,
        predownload=args.predownload,
    )
    loader = StreamingDataLoader(
        dataset, batch_size=args.device_batch, num_workers=args.workers, persistent_workers=True
    )
    batches: list[list[int]] = []
    most_cached = 0
    for _ in range(args.epochs):
        for batch in loader:
            batches.append(batch["id"].tolist())
            most_cached = max(most_cached, cached_bytes(Path(args.local)))
            dist.barrier()
    print(json.dumps({"batches": batches, "most_cached": most_cached}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
