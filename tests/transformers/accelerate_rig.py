"""One rank of a plain Hugging Face Accelerate loop over a StreamingDataLoader, run as a script.

``python accelerate_rig.py CONFIG_JSON``: ``accelerator.prepare(model, optimizer, loader)``, train to
``steps`` (the step count goes on from ``start_step`` after ``load_state(resume)``), ``save_state`` after
step ``save_at``; prints ``{"prepared_is_loader": ..., "steps": {step: ids of this rank}}`` as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import send_to_device
from torch import nn

from stream_plugin import StreamingDataLoader, StreamingDataset


def main(config: dict[str, Any]) -> dict[str, Any]:
    accelerator = Accelerator(cpu=True)
    dataset = StreamingDataset(
        local=config["data"], shuffle=True, shuffle_seed=7, batch_size=config["batch_size"]
    )
    loader = StreamingDataLoader(
        dataset,
        batch_size=config["batch_size"],
        num_workers=config.get("num_workers", 0),
        multiprocessing_context=config.get("start_method"),
    )
    model = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    if config.get("resume"):
        accelerator.load_state(config["resume"])
    step = config.get("start_step", 0)
    steps: dict[int, list[int]] = {}
    while step < config["steps"]:
        for batch in prepared:
            batch = send_to_device(batch, accelerator.device)
            step += 1
            steps[step] = [int(i) for i in batch["id"].tolist()]
            loss = model(batch["id"].to(torch.float32).unsqueeze(1) / 100).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            if step == config.get("save_at"):
                accelerator.save_state(config["save_dir"])
            if step == config["steps"]:
                break
    return {"prepared_is_loader": prepared is loader, "steps": steps}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
