"""The chaos soak: ranks read one cold cache from S3 behind a faulty network, get SIGKILLed, and resume.

A real S3 endpoint (moto on loopback) sits behind the fault proxy, which injects 5xx answers,
connection resets, stalled and truncated bodies at random. Each launch starts a job of 4 ranks (at
times 2 or 3: an elastic resume) with 2 DataLoader workers each, all on one node and one cache folder,
starting cold; a ``cache_limit`` below the dataset's size makes every epoch download again. A launch reads the rest of one epoch; at random a rank or one of its workers is
SIGKILLed mid-epoch, the rest of the job is stopped, and the next launch resumes from the last state
every rank had reached (a checkpoint), discarding what the ledgers hold past it, as training would.

At the end the ledger of every epoch must equal that epoch's global order exactly (the ranks'
rank-balance repeats, fewer than the world size per epoch, are recorded apart and left out), and the cache must hold only whole shards that match their sha1. The CI run
covers 3 epochs; ``pytest tests/soak --soak-minutes N`` keeps going for N minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.fault_proxy import FaultProxy, FaultRule
from support.paths import REPO_DIR
from support.s3_server import S3Bucket

from stream_plugin import MDSWriter, StreamingDataset
from stream_plugin.format.hashing import hash_file
from stream_plugin.format.index import load_index

SCRIPT = Path(__file__).with_name("soak_rank.py")
GLOBAL_BATCH = 24  # divisible by every world size used
SAMPLES = 1210  # 50 global batches per epoch and 10 samples: on 4 or 3 ranks, 2 repeats
CI_EPOCHS = 3
LAUNCH_TIMEOUT = 240.0
CACHE_LIMIT = "60kb"  # below the ~75 KB dataset: shards are evicted and downloaded again through the faults
STEP_SECONDS = 0.05  # "training" per batch: a warm cache would otherwise finish a pass between two polls


def fault_rules() -> list[FaultRule]:
    """Random faults on reads (GET and HEAD): about one request in five fails (13 attempts each)."""
    reads = frozenset({"get", "head"})
    return [
        FaultRule("http_503", kinds=reads, every=None, fraction=0.07),
        FaultRule("http_500", kinds=reads, every=None, fraction=0.03),
        FaultRule("reset", kinds=reads, every=None, fraction=0.05),
        FaultRule("truncate", kinds=reads, every=None, fraction=0.05),
        FaultRule("stall_body", kinds=reads, every=None, fraction=0.02),
    ]


@dataclass
class Figures:
    launches: int = 0
    kills: dict[str, int] = field(default_factory=lambda: {"rank": 0, "worker": 0})
    resumes: int = 0
    world_sizes: list[int] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # what happened to each launch, for failure messages


@dataclass
class Ledger:
    """Committed global batches: epoch -> step -> ids of the global batch (ranks in order)."""

    epochs: dict[int, dict[int, list[int]]] = field(default_factory=dict)

    def commit(self, epoch: int, step: int, ids: list[int]) -> None:
        steps = self.epochs.setdefault(epoch, {})
        assert step not in steps, f"epoch {epoch} step {step} committed twice"
        steps[step] = ids

    def epoch_ids(self, epoch: int) -> list[int]:
        steps = self.epochs.get(epoch, {})
        assert sorted(steps) == list(range(len(steps))), f"epoch {epoch}: steps missing from the ledger"
        return [sample for step in sorted(steps) for sample in steps[step]]


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Whole JSON lines of a ledger (a line cut by SIGKILL mid-write is ignored)."""
    if not path.exists():
        return []
    lines = []
    for text in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            lines.append(json.loads(text))
    return lines


def forked_workers(pid: int) -> list[int]:
    """A rank's DataLoader workers: children of ``pid`` forked with its command line (not, say, a
    resource tracker), found through ``/proc/<n>/stat``."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # Fields after the parenthesised name: state, ppid, ...
            is_child = int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid
            if is_child and (stat.parent / "cmdline").read_bytes() == command:
                found.append(int(stat.parent.name))
        except OSError:
            continue  # the process ended meanwhile
    return sorted(found)


class Job:
    """One launch: ``world`` rank processes on one node, resuming from ``state`` (or fresh)."""

    def __init__(self, folder: Path, world: int, remote: str, cache: Path, state: dict[str, Any] | None, env: dict[str, str]) -> None:
        folder.mkdir(parents=True)
        self.world = world
        self.ledgers = [folder / f"rank{rank}.jsonl" for rank in range(world)]
        command = [sys.executable, str(SCRIPT), "--remote", remote, "--cache", str(cache)]
        command += ["--global-batch", str(GLOBAL_BATCH), "--step-seconds", str(STEP_SECONDS)]
        command += ["--cache-limit", CACHE_LIMIT]
        if state is not None:
            (folder / "state.json").write_text(json.dumps(state))
            command += ["--state-in", str(folder / "state.json")]
        self.processes = []
        for rank in range(world):
            rank_env = {**env, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world)}
            self.processes.append(
                subprocess.Popen([*command, "--ledger", str(self.ledgers[rank])], env=rank_env, stderr=subprocess.PIPE, text=True)
            )

    def steps_recorded(self) -> list[int]:
        """Batches each rank has recorded in this launch."""
        return [sum(1 for line in read_lines(path) if "step" in line) for path in self.ledgers]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait(timeout=30)
            if process.stderr is not None:
                process.stderr.close()


def run_launch(job: Job, kill: tuple[int, str] | None, rng: random.Random, figures: Figures) -> bool:
    """Run a launch to its end, or SIGKILL a "rank" or one of its "worker"s once ``kill[0]`` batches
    are recorded.

    Returns whether every rank finished its pass.
    """
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    killed = False
    try:
        while True:
            codes = [process.poll() for process in job.processes]
            if all(code == 0 for code in codes):
                figures.events.append(f"launch finished (kill planned: {kill}, done: {killed})")
                return True
            failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                if not killed:  # a failure nobody caused: show it
                    stderr = job.processes[failed[0]].stderr
                    raise AssertionError(f"rank {failed[0]} failed by itself:\n{stderr.read() if stderr else ''}")
                return False
            # Ranks run unsynchronised (no collective), so the victim is one that is running and past
            # ``kill[0]`` batches; the ledgers commit only what every rank reached.
            running: list[int] = []
            if kill is not None and not killed:
                steps = job.steps_recorded()
                running = [rank for rank, code in enumerate(codes) if code is None and steps[rank] >= kill[0]]
            if kill is not None and running:
                rank = rng.choice(running)
                workers = forked_workers(job.processes[rank].pid)
                if workers and kill[1] == "worker":
                    os.kill(rng.choice(workers), signal.SIGKILL)
                    figures.kills["worker"] += 1
                    figures.events.append(f"worker of rank {rank} killed after {kill[0]} batches")
                else:
                    job.processes[rank].send_signal(signal.SIGKILL)
                    figures.kills["rank"] += 1
                    figures.events.append(f"rank {rank} killed after {kill[0]} batches (workers: {workers})")
                killed = True
            assert time.monotonic() < deadline, "a launch ran past its time limit"
            time.sleep(0.05)
    finally:
        job.stop()


def commit(job: Job, ledger: Ledger, finished: bool) -> dict[str, Any] | None:
    """Commit the global batches every rank reached; return the state to resume from (None: unchanged)."""
    per_rank = [[line for line in read_lines(path) if "step" in line] for path in job.ledgers]
    reached = min(len(lines) for lines in per_rank)
    for position in range(reached):
        lines = [rank_lines[position] for rank_lines in per_rank]
        assert len({(line["epoch"], line["step"]) for line in lines}) == 1, "ranks disagree on the step"
        assert all(line["state"] == lines[0]["state"] for line in lines), "ranks disagree on the state"
        assert sum(line["repeats"] for line in lines) < len(lines), "as many repeats as ranks"
        ledger.commit(lines[0]["epoch"], lines[0]["step"], [i for line in lines for i in line["ids"]])
    if finished:
        done = [next(line for line in read_lines(path) if line.get("done")) for path in job.ledgers]
        assert all(line["state"] == done[0]["state"] for line in done)
        return done[0]["state"]  # type: ignore[no-any-return]
    return per_rank[0][reached - 1]["state"] if reached else None


def write_dataset(folder: Path) -> Path:
    """About 60 small MDS shards with sha1 digests; every sample carries its id."""
    with MDSWriter(out=str(folder), columns={"id": "int", "data": "bytes"}, size_limit=1 << 11, hashes=["sha1"]) as writer:
        for sample_id in range(SAMPLES):
            writer.write({"id": sample_id, "data": bytes([sample_id % 251]) * 40})
    return folder


def reference_orders(dataset_folder: Path, epochs: int) -> list[list[int]]:
    """Each epoch's global order, read on one process without workers (the order is layout-free)."""
    dataset = StreamingDataset(
        local=str(dataset_folder), batch_size=GLOBAL_BATCH, shuffle=True, shuffle_seed=5, num_canonical_nodes=4
    )
    return [[sample["id"] for sample in dataset] for _ in range(epochs)]


def check_cache(cache: Path, dataset_folder: Path) -> int:
    """Every visible file in the cache is index.json or a whole shard matching its sha1; returns shards."""
    entries = {entry.raw_data.basename: entry.raw_data for entry in load_index(dataset_folder)}
    shards = 0
    for path in sorted(cache.iterdir()):
        if path.name.startswith(".") or path.name == "index.json":
            continue
        info = entries[path.name]
        assert path.stat().st_size == info.bytes, path.name
        assert hash_file("sha1", path) == info.hashes["sha1"], path.name
        shards += 1
    return shards


@pytest.mark.slow
def test_chaos_soak_ledgers_equal_the_global_order(
    s3_bucket: S3Bucket, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    minutes = request.config.getoption("--soak-minutes", default=None)
    started = time.monotonic()
    rng = random.Random(2026)
    dataset_folder = write_dataset(tmp_path / "dataset")
    s3_bucket.upload_folder(dataset_folder, "soak")
    cache = tmp_path / "cache"
    ledger, figures = Ledger(), Figures()
    state: dict[str, Any] | None = None
    epoch = 0
    with FaultProxy((s3_bucket.server.host, s3_bucket.server.port), fault_rules(), seed=7, stall_seconds=3.0) as proxy:
        env = {**os.environ, "PYTHONPATH": str(REPO_DIR), "S3_ENDPOINT_URL": proxy.endpoint_url}
        while epoch < CI_EPOCHS or (minutes is not None and time.monotonic() - started < float(minutes) * 60):
            world = 4 if figures.launches == 0 or rng.random() < 0.5 else rng.choice((2, 3))
            figures.world_sizes.append(world)
            # The first two launches lose a worker, then a rank; in a long soak later ones are killed at random.
            victim = ("worker", "rank")[figures.launches % 2]
            random_kill = minutes is not None and rng.random() < 0.3
            kill = (rng.randrange(1, 20), victim) if figures.launches < 2 or random_kill else None
            job = Job(tmp_path / f"launch{figures.launches}", world, s3_bucket.url("soak"), cache, state, env)
            figures.launches += 1
            finished = run_launch(job, kill, rng, figures)
            resume_from = commit(job, ledger, finished)
            if finished:
                epoch += 1
            else:
                figures.resumes += 1
            state = resume_from if resume_from is not None else state
        faults = dict(proxy.injected)
    orders = reference_orders(dataset_folder, epoch)
    checked = 0
    for number, order in enumerate(orders):
        ids = ledger.epoch_ids(number)
        assert ids == order, f"epoch {number}: the ledger differs from the global order"
        assert set(ids) == set(range(SAMPLES))
        checked += len(ids)
    shards = check_cache(cache, dataset_folder)
    print(
        f"\nchaos soak: {sum(faults.values())} faults injected {faults}, kills {figures.kills}, "
        f"{figures.resumes} resumes over {figures.launches} launches (world sizes {figures.world_sizes}), "
        f"{epoch} epochs, {checked} samples checked against the global order, {shards} cached shards verified, "
        f"{time.monotonic() - started:.0f} s"
    )
    assert sum(faults.values()) > 0
    assert figures.kills["worker"] > 0 and figures.kills["rank"] > 0 and figures.resumes >= 2, figures.events
