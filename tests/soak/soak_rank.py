"""One rank of the chaos soak: read one pass (the rest of an epoch) and keep a ledger of what it consumed.

Run with RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE set. After every batch it appends one JSON
line to ``--ledger``: the epoch, the global step (from ``loader.position``), the ids before any
rank-balance repeats (``loader.real_samples``), how many repeats followed, and the loader's state
after the batch. A last line ``{"done": ...}`` carries the state between
passes. The line is flushed before the next batch is taken, so a SIGKILL loses at most a batch the
orchestrator has not counted as consumed.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from stream_plugin import StreamingDataLoader, StreamingDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--remote", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--global-batch", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--state-in", default=None)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--cache-limit", default=None, help="evict shards so later epochs download again")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="time each batch takes to train")
    args = parser.parse_args()
    world = int(os.environ["WORLD_SIZE"])
    device_batch = args.global_batch // world
    dataset = StreamingDataset(
        remote=args.remote,
        local=args.cache,
        batch_size=device_batch,
        shuffle=True,
        shuffle_seed=5,
        num_canonical_nodes=4,
        validate_hash="sha1",
        download_retry=12,
        download_timeout=1.0,
        cache_limit=args.cache_limit,
    )
    loader = StreamingDataLoader(dataset, batch_size=device_batch, num_workers=args.workers)
    if args.state_in:
        with open(args.state_in) as handle:
            loader.load_state_dict(json.load(handle))
    with open(args.ledger, "a") as ledger:
        for batch in loader:
            position = loader.position
            assert position is not None
            step = position.start // position.epoch_batch_size + position.batches - 1
            # The samples before the rank-balance repeats of the epoch's last batch (all, elsewhere).
            real = loader.real_samples(position.batches - 1)
            ids = batch["id"].tolist()
            line = {"epoch": position.epoch, "step": step, "ids": ids[:real], "repeats": len(ids) - real}
            line["state"] = loader.state_dict()
            ledger.write(json.dumps(line) + "\n")
            ledger.flush()
            time.sleep(args.step_seconds)
        ledger.write(json.dumps({"done": True, "state": loader.state_dict()}) + "\n")


if __name__ == "__main__":
    main()
