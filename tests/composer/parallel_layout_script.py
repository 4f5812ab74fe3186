"""One rank of the 4-rank Composer layout run (``composer -n 4 parallel_layout_script.py config.json``).

Composer's Trainer refuses tensor parallelism on CPU (TP needs FSDP, and Composer 0.32's FSDP wrap
calls ``torch.cuda.current_device()``), so this builds what the Trainer builds before that point:
Composer's own ``State`` with a ``ParallelismConfig`` of FSDP plus ``tensor_parallel_degree=2``, which
creates the real ``(data_parallel_shard=2, tensor_parallel=2)`` DeviceMesh over the 4 gloo ranks. Our
DataSpec builder and ``ExactDataResumption`` then run against that state as they would in ``fit``.
Writes ``rank{r}.json`` into the config's ``out`` folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from composer.core import State, Timestamp
from composer.devices import DeviceCPU
from composer.loggers import Logger
from composer.utils import dist
from composer.utils.parallelism import FSDPConfig, ParallelismConfig, TPConfig

from stream_plugin.errors import LayoutError
from stream_plugin_composer import ExactDataResumption, build_streaming_dataspec

BATCHES = 3


def ids_of(batch: Any) -> list[int]:
    return [int(value) for value in batch["id"]]


def read_with_the_trainer_state(state: State, spec: Any) -> dict[str, Any]:
    """``ExactDataResumption`` at fit start, ``BATCHES`` batches, then the resume state Composer's clock
    gives after them (Composer sums every rank's batch size into ``sample_in_epoch``)."""
    callback = ExactDataResumption()
    logger = Logger(state)
    state.set_dataloader(spec.dataloader, "train")
    state.train_dataloader = state.dataloader
    callback.init(state, logger)
    callback.fit_start(state, logger)
    batches = []
    for batch in spec.dataloader:
        batches.append(ids_of(batch))
        if len(batches) == BATCHES:
            break
    counted = sum(len(ids) for ids in batches) * dist.get_world_size()
    state.timestamp = Timestamp(batch=BATCHES, sample=counted, batch_in_epoch=BATCHES, sample_in_epoch=counted)
    return {"batches": batches, "resume_sample_in_epoch": callback.current_state(state).sample_in_epoch}


def main(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    device = DeviceCPU()
    dist.initialize_dist(device)
    rank = dist.get_global_rank()
    tensor_parallel = {"fsdp": {}, "tp": {"tensor_parallel_degree": 2}}
    state = State(
        model=torch.nn.Linear(4, 1),
        rank_zero_seed=0,
        run_name="layout",
        device=device,
        parallelism_config=ParallelismConfig(fsdp=FSDPConfig(), tp=TPConfig(tensor_parallel_degree=2)),
    )
    assert state.device_mesh is not None
    dataset = {"remote": config["data"], "local": config["cache"], "shuffle": True, "shuffle_seed": 7}
    result: dict[str, Any] = {"mesh": list(state.device_mesh.mesh_dim_names or ())}

    spec = build_streaming_dataspec(device_batch_size=2, dataset=dataset, parallelism_config=tensor_parallel)
    result["tensor_parallel"] = read_with_the_trainer_state(state, spec)

    # The same run without telling the DataSpec: every rank reads its own data, which the mesh contradicts.
    try:
        read_with_the_trainer_state(state, build_streaming_dataspec(device_batch_size=2, dataset=dataset))
        result["unaware"] = None
    except LayoutError as error:
        result["unaware"] = str(error)

    # llm-foundry's seq_parallel_replication: 2 consecutive ranks share each sample; a fractional
    # device batch (0.5 sample per rank) makes one whole sample per sequence-parallel pair.
    text = {"remote": config["tokens"], "local": config["tokens_cache"], "max_seq_len": 8}
    spec = build_streaming_dataspec(device_batch_size=0.5, dataset={**text, "seq_parallel_replication": 2})
    loader: Any = spec.dataloader
    batches = []
    for batch in loader:
        batches.append(batch["input_ids"].tolist())  # (samples, max_seq_len) token rows
        if len(batches) == BATCHES:
            break
    result["sequence_parallel"] = {"batches": batches, "replication": loader.dataset.data_parallel.replication}
    Path(config["out"], f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
