"""One training rank for the multi-process tests: iterate a real StreamingDataLoader, print its batches.

Run with RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE set (and MASTER_ADDR / MASTER_PORT for
``--gloo``). Prints one JSON object: the id lists of the batches it took, and its state after them.
"""

from __future__ import annotations

import argparse
import json
import os

from stream_plugin import StreamingDataLoader, StreamingDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--remote", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--device-batch", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=None, help="stop after this many batches")
    parser.add_argument("--state-in", default=None)
    parser.add_argument("--gloo", action="store_true")
    args = parser.parse_args()
    if args.gloo:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    node = int(os.environ["RANK"]) // int(os.environ["LOCAL_WORLD_SIZE"])
    dataset = StreamingDataset(
        remote=args.remote,
        local=os.path.join(args.cache, f"node{node}"),
        batch_size=args.device_batch,
        shuffle=True,
        num_canonical_nodes=4,
    )
    loader = StreamingDataLoader(dataset, batch_size=args.device_batch, num_workers=args.workers)
    if args.state_in:
        with open(args.state_in) as handle:
            loader.load_state_dict(json.load(handle))
    batches: list[list[int]] = []
    for _ in range(args.epochs):
        for batch in loader:
            batches.append(batch["id"].tolist())
            if args.steps is not None and len(batches) == args.steps:
                break
    print(json.dumps({"batches": batches, "state": loader.state_dict()}))
    if args.gloo:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
