"""Real training runs to hold the simulator against: ranks as processes, a throttling server as the store.

``run_real`` starts ``tests/simulate/sim_rank.py`` once per rank (nodes x ranks per node, an env-var world
as torchrun sets it), each node reading through its own group of the ``ThrottleServer``, and gathers what
the ranks measured into a ``Measured`` run: step by step, the latest rank's times (every step waits for
the slowest rank, as data parallelism does).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from support.datasets import write_ids
from support.ranks import launch_ranks
from support.throttle_proxy import ThrottleServer

from stream_plugin.reading.config import DatasetConfig
from stream_plugin.simulate import Workload
from stream_plugin.simulate.config import read_streams, workload_of_streams

REPO = Path(__file__).resolve().parents[2]
RANK_SCRIPT = REPO / "tests" / "simulate" / "sim_rank.py"
ID_BYTES = 16  # what a write_ids MDS sample takes beyond its payload: its offset, id and length


def write_dataset(folder: Path, *, samples: int, per_shard: int, payload: int) -> Path:
    """``samples`` samples of ``payload`` bytes, ``per_shard`` to a shard (the last may hold fewer)."""
    write_ids(
        folder,
        range(samples),
        size_limit=per_shard * (payload + ID_BYTES) + (payload + ID_BYTES) // 2,
        payload=payload,
    )
    return folder


def workload_of(folder: Path, config: DatasetConfig) -> Workload:
    """The simulator's view of the dataset in ``folder``, read from its index as ``simulate`` reads one."""
    return workload_of_streams(read_streams({"local": str(folder)}), config, [])


@dataclass(frozen=True)
class Measured:
    """A real run's steps. Seconds from the moment the loader's first iterator was created (``zero``, on
    the machine's monotonic clock: the latest rank's)."""

    zero: float
    wait: np.ndarray  # float64 (T,): the longest any rank waited for its batch after its previous step
    got: np.ndarray  # float64 (T,): when the last rank had its batch in hand
    start: np.ndarray  # float64 (T,): when each step's compute started (after the barrier; latest rank)
    end: np.ndarray  # float64 (T,)
    epoch_steps: tuple[int, ...]
    batches: tuple[list[list[int]], ...]  # per rank: the sample ids of each of its batches

    @property
    def time_to_first_batch(self) -> float:
        return float(self.start[0])

    @property
    def step_costs(self) -> np.ndarray:
        """float64 (T,): each step's time from the last rank's batch in hand to its end (the barrier and
        the compute): what a step costs on this machine now, beyond any wait for data."""
        return self.end - self.got

    @property
    def epoch_ends(self) -> np.ndarray:
        """float64 (epochs,): when each epoch's last step ended."""
        return self.end[np.cumsum(self.epoch_steps) - 1]

    @property
    def epoch_times(self) -> np.ndarray:
        return np.diff(np.concatenate([[0.0], self.epoch_ends]))

    def stalled_steps(self, tolerance: float) -> int:
        return int(np.count_nonzero(self.wait > tolerance))


def run_real(
    server: ThrottleServer,
    local: Path,
    *,
    nodes: int,
    ranks_per_node: int,
    workers: int,
    device_batch: int,
    epochs: int,
    step_time: float = 0.0,
    prefetch_factor: int = 2,
    dataset: dict[str, Any] | None = None,
    path: str = "ds",
    timeout: float = 180,
) -> Measured:
    """Run the ranks to the end; ``dataset`` holds more ``StreamingDataset`` arguments (JSON values)."""
    remote = server.remote("node{node}", path)
    command = [sys.executable, str(RANK_SCRIPT), "--remote", remote, "--local", str(local)]
    command += ["--device-batch", str(device_batch), "--workers", str(workers), "--epochs", str(epochs)]
    command += ["--step-time", str(step_time), "--prefetch-factor", str(prefetch_factor)]
    command += ["--dataset", json.dumps(dataset or {})]
    outputs = launch_ranks(
        command,
        world=nodes * ranks_per_node,
        ranks_per_node=ranks_per_node,
        env={"PYTHONPATH": str(REPO)},
        timeout=timeout,
    )
    steps = {len(output["got"]) for output in outputs}
    assert len(steps) == 1, f"expected every rank to take the same number of steps, found {steps}"
    got, start, end = (np.array([output[name] for output in outputs]) for name in ("got", "start", "end"))
    previous_end = np.concatenate([np.zeros((len(outputs), 1)), end[:, :-1]], axis=1)  # (ranks, T)
    return Measured(
        zero=max(output["zero"] for output in outputs),
        wait=np.max(got - previous_end, axis=0),
        got=np.max(got, axis=0),
        start=np.max(start, axis=0),
        end=np.max(end, axis=0),
        epoch_steps=tuple(outputs[0]["epoch_steps"]),
        batches=tuple(output["batches"] for output in outputs),
    )
