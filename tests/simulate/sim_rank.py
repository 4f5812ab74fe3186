"""One rank of the simulator's validation runs (tests/simulate/test_validate_*.py): train in lockstep, time it.

Run with RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / MASTER_ADDR / MASTER_PORT set (see
``support.ranks.launch_ranks``). Node ``n`` (``RANK // LOCAL_WORLD_SIZE``) reads ``--remote`` with
``{node}`` replaced by ``n`` into its own cache folder ``<--local>/node<n>``.

Each step is a training step under data parallelism: take the batch (``next``), meet the other ranks at a
gloo barrier (the batch is then on every rank: the step starts), and compute for ``--step-time`` seconds
(a sleep). Times are ``time.monotonic()`` seconds from this rank's zero: the moment, right after a
barrier of all ranks, just before the loader's first iterator is created (the workers start then).

Prints one JSON object: ``zero`` (this rank's zero, in ``time.monotonic()`` seconds: the clock every
process of the machine shares, so a server's timestamps can be set against it), ``got`` (when ``next``
handed over each step's batch), ``start`` / ``end`` (each step's start and end), ``epoch_steps`` (steps
of each epoch), ``batches`` (the sample ids of every batch).
A step's wait for data is ``got`` less the previous step's ``end`` (0 for the first): the time blocked in
``next``, plus, at an epoch's first step, ending the previous pass and starting this one.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch.distributed as dist

from stream_plugin import StreamingDataLoader, StreamingDataset


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--remote", required=True, help="the node's remote; {node} is its number")
    parser.add_argument("--local", required=True)
    parser.add_argument("--device-batch", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--step-time", type=float, default=0.0)
    parser.add_argument("--dataset", default="{}", help="more StreamingDataset arguments, as JSON")
    parser.add_argument("--prefetch-factor", type=int, default=2)
    return parser.parse_args()


def main() -> None:
    args = arguments()
    dist.init_process_group("gloo")
    node = int(os.environ["RANK"]) // int(os.environ["LOCAL_WORLD_SIZE"])
    dataset = StreamingDataset(
        remote=args.remote.format(node=node),
        local=os.path.join(args.local, f"node{node}"),
        batch_size=args.device_batch,
        **json.loads(args.dataset),
    )
    options: dict[str, Any] = {}
    if args.workers:
        options = {"persistent_workers": True, "prefetch_factor": args.prefetch_factor}
    loader = StreamingDataLoader(dataset, batch_size=args.device_batch, num_workers=args.workers, **options)
    got: list[float] = []
    starts: list[float] = []
    ends: list[float] = []
    epoch_steps: list[int] = []
    batches: list[list[int]] = []
    dist.barrier()
    zero = time.monotonic()
    for _ in range(args.epochs):
        iterator = iter(loader)
        steps = 0
        while True:
            batch = next(iterator, None)
            if batch is None:
                break
            got.append(time.monotonic() - zero)
            dist.barrier()
            starts.append(time.monotonic() - zero)
            time.sleep(args.step_time)
            ends.append(time.monotonic() - zero)
            batches.append(batch["id"].tolist())
            steps += 1
        epoch_steps.append(steps)
    times = {"zero": zero, "got": got, "start": starts, "end": ends}
    print(json.dumps({**times, "epoch_steps": epoch_steps, "batches": batches}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
