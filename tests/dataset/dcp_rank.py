"""One rank of a torchtitan-style loop: the loader is saved and loaded with torch.distributed.checkpoint.

``python dcp_rank.py CONFIG_JSON`` (RANK, WORLD_SIZE, MASTER_* in the environment): reads batches up to
step ``steps``, ``dcp.save({"data": loader})`` after step ``save_at``, or first ``dcp.load`` from
``resume`` and counts on from ``start_step``; prints ``{"steps": {step: this rank's ids}}`` as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from stream_plugin import StreamingDataLoader, StreamingDataset


def main(config: dict[str, Any]) -> dict[str, Any]:
    dist.init_process_group("gloo")
    dataset = StreamingDataset(
        local=config["data"], shuffle=True, shuffle_seed=5, batch_size=config["batch_size"]
    )
    loader = StreamingDataLoader(
        dataset,
        batch_size=config["batch_size"],
        num_workers=config.get("num_workers", 0),
        multiprocessing_context=config.get("start_method"),
    )
    if config.get("resume"):
        dcp.load({"data": loader}, checkpoint_id=config["resume"])
    step = config.get("start_step", 0)
    steps: dict[int, list[int]] = {}
    while step < config["steps"]:
        for batch in loader:
            step += 1
            steps[step] = [int(i) for i in batch["id"]]
            if step == config.get("save_at"):
                dcp.save({"data": loader}, checkpoint_id=config["save_dir"])
            if step == config["steps"]:
                break
    dist.destroy_process_group()
    return {"steps": steps}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
