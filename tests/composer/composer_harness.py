"""Run the example runner (``python train.py`` or ``composer -n N train.py``) and signal its ranks.

Every run is configured by an llm-foundry-style YAML written into the test's folder, and records its
trained sample ids with ``SampleRecorder`` (``composer_recorder.py``, on PYTHONPATH for the children);
``assert_same_history`` compares such a history with the uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from support.resume import assert_same_output

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = REPO / "examples" / "composer"
RUNNER = EXAMPLE_DIR / "train.py"
TESTS_DIR = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent  # the Composer environment's bin/: python and the composer launcher

GLOBAL_BATCH = 8
NUM_SAMPLES = 200
BATCHES_PER_EPOCH = NUM_SAMPLES // GLOBAL_BATCH
EPOCHS = 3
WAIT_S = 180.0


def run_config(
    root: Path,
    data: Path,
    *,
    save_interval: str,
    num_workers: int = 0,
    delay_s: float = 0.0,
    max_duration: str = f"{EPOCHS}ep",
) -> dict[str, Any]:
    """The YAML config of one test run: tiny model, the shared tiny dataset, its own cache folder."""
    return {
        "run_name": "composer-test",
        "seed": 17,
        "device": "cpu",
        "max_duration": max_duration,
        "global_train_batch_size": GLOBAL_BATCH,
        "save_folder": str(root / "checkpoints"),
        "save_interval": save_interval,
        "save_num_checkpoints_to_keep": -1,
        "autoresume": True,
        "model": {"name": "tiny_model:build_model", "in_features": 4},
        "optimizer": {"name": "decoupled_sgdw", "lr": 0.01},
        "train_loader": {
            "name": "stream_plugin",
            "dataset": {
                "remote": str(data),
                "local": str(root / "cache"),
                "shuffle": True,
                "shuffle_seed": 7,
            },
            "num_workers": num_workers,
        },
        "callbacks": {
            "stream_plugin_resume": {},
            "stream_plugin_preemption": {},
            "composer_recorder:SampleRecorder": {"out": str(root / "history.json"), "delay_s": delay_s},
        },
    }


def write_config(root: Path, config: dict[str, Any]) -> Path:
    path = root / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Run:
    """One launched command: the runner on one rank, or the composer launcher over several."""

    process: subprocess.Popen[bytes]
    root: Path
    nproc: int
    log: Path

    def wait(self, timeout: float = WAIT_S) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            raise AssertionError(f"the run did not finish in {timeout}s\n{self.logs()}") from None

    def logs(self) -> str:
        """The launcher's and every rank's output, for assertion messages."""
        parts = []
        for path in [self.log, *sorted(self.root.glob("rank*.log"))]:
            if path.exists():
                text = path.read_text(errors="replace")
                parts.append(f"----- {path.name} -----\n{text[-6000:]}")
        return "\n".join(parts)


def launch(root: Path, config: Path, *, nproc: int, runner: Path = RUNNER) -> Run:
    """Start ``runner`` with ``nproc`` ranks (``composer -n`` when nproc > 1), in its own session."""
    if nproc == 1:
        command = [str(BIN / "python"), str(runner), str(config)]
    else:
        command = [
            str(BIN / "composer"),
            "-n",
            str(nproc),
            "--master_port",
            str(_free_port()),
            "--stdout",
            str(root / "rank{rank}.log"),
            "--stderr",
            str(root / "rank{rank}.log"),
            str(runner),
            str(config),
        ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",  # llm-foundry runs load their tokenizer from a local folder only
    }
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    log = root / f"launch-{len(list(root.glob('launch-*.log')))}.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command, cwd=root, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Run(process, root, nproc, log)


def wait_for_progress(run: Run, reached: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """Every rank's progress once rank 0's satisfies ``reached``; fails if the run ends first."""
    deadline = time.monotonic() + WAIT_S
    paths = [run.root / f"progress-rank{rank}.json" for rank in range(run.nproc)]
    while time.monotonic() < deadline:
        if run.process.poll() is not None:
            raise AssertionError(f"the run ended (code {run.process.returncode}) early\n{run.logs()}")
        if all(path.exists() for path in paths):
            progress = [json.loads(path.read_text()) for path in paths]
            if reached(progress[0]):
                return progress
        time.sleep(0.05)
    raise AssertionError(f"the run did not reach the point in {WAIT_S}s\n{run.logs()}")


def signal_ranks(progress: list[dict[str, Any]], signum: int) -> None:
    """Send ``signum`` to each training process (not the launcher), as a preempting scheduler would."""
    for rank in progress:
        os.kill(int(rank["pid"]), signum)


def signal_process_group(run: Run, signum: int) -> None:
    """Send ``signum`` to the run's whole process group (rank and DataLoader workers), as SLURM does."""
    os.killpg(run.process.pid, signum)


def clear_progress(root: Path) -> None:
    for path in root.glob("progress-rank*.json"):
        path.unlink()


def read_history(root: Path) -> list[list[int]]:
    return json.loads((root / "history.json").read_text())["history"]


def history_ids(batch: list[int]) -> list[int]:
    """The sample ids of one history entry, ``[epoch, *ids]``."""
    return batch[1:]


def assert_same_history(found: list[list[int]], expected: list[list[int]], *, what: str = "the resumed run") -> None:
    """``found`` trained exactly ``expected``'s global batches, in the same epochs: ``support.resume``'s rule.

    A recorder's history already joins the batches before the checkpoint (restored from it) and after.
    """
    assert_same_output(found, expected, what=what, ids=history_ids)


def in_epoch(epoch: int, *, after_batch: int) -> Callable[[dict[str, Any]], bool]:
    """Progress predicate: ``after_batch`` batches into ``epoch`` or later (mid-epoch when small)."""
    return lambda rank0: (rank0["epoch"], rank0["batch_in_epoch"]) >= (epoch, after_batch)
