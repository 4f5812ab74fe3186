"""Start one process per rank of an env-var world (as torchrun sets it) and collect their outputs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_ranks(
    command: Sequence[str],
    *,
    world: int,
    ranks_per_node: int,
    env: Mapping[str, str] | None = None,
    timeout: float = 180,
) -> list[dict[str, Any]]:
    """Run ``command`` once per rank at once (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and a
    gloo rendezvous in the environment, plus ``env``); each must exit 0 and print its result as JSON
    on its last line. The results, in rank order."""
    port = str(free_port())
    processes = []
    for rank in range(world):
        layout = {
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank % ranks_per_node),
            "LOCAL_WORLD_SIZE": str(ranks_per_node),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        processes.append(
            subprocess.Popen(
                list(command),
                env={**os.environ, **(env or {}), **layout},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=timeout)
        assert process.returncode == 0, stderr
        outputs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outputs
