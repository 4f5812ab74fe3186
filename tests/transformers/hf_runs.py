"""Run ``hf_rig.py`` on N ranks (gloo, CPU) and read back what each optimizer step trained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.ranks import free_port

RIG = Path(__file__).with_name("hf_rig.py")


@dataclass(frozen=True)
class Run:
    codes: list[int]
    outputs: list[str]  # each rank's stderr, for failures
    steps: dict[int, list[int]]  # global step -> the sorted ids it trained over every rank


def run_ranks(config: dict[str, Any], *, world: int, timeout: float = 240) -> Run:
    """Start ``world`` ranks of the rig at once (a torchrun-like environment); wait for all of them."""
    port = str(free_port())
    processes = []
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error",
            "PYTHONFAULTHANDLER": "1",  # a native abort prints every thread's Python stack to stderr
        }
        processes.append(
            subprocess.Popen(
                [sys.executable, str(RIG), json.dumps(config)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [process.communicate(timeout=timeout)[1] for process in processes]
    codes = [process.returncode for process in processes]
    return Run(codes=codes, outputs=outputs, steps=read_steps(config, world))


def read_steps(config: dict[str, Any], world: int) -> dict[int, list[int]]:
    """Each optimizer step's ids over all ranks, numbered as the Trainer numbers steps (resumes included)."""
    accumulation = config.get("grad_accum", 1)
    steps: dict[int, list[int]] = {}
    for rank in range(world):
        path = Path(config["output_dir"], f"train-ids-{config.get('tag', 'run')}-{rank}.json")
        if not path.is_file():
            continue
        record = json.loads(path.read_text())
        first = int(Path(record["resumed_from"]).name.split("-")[1]) if record["resumed_from"] else 0
        for index, ids in enumerate(record["train"]):
            steps.setdefault(first + index // accumulation + 1, []).extend(ids)
    return {step: sorted(ids) for step, ids in sorted(steps.items())}
