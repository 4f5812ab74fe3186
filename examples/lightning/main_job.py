"""The main job: preempt a 2-process Lightning DDP run mid-epoch, resume it on 1 process, and compare.

1. writes a small dataset of three streams to a local folder that stands in for the remote (``file://``),
   each trainer reading it through its own local cache folder;
2. trains the example model with Lightning DDP on 2 CPU processes (global batch 8 = 4 x 2);
3. sends SIGTERM to rank 0 mid-epoch in epoch 1: PreemptionCheckpoint finishes the step, saves
   ``last.ckpt`` atomically and the job exits 143;
4. runs the same command on 1 process (global batch 8 = 8 x 1): it resumes from the newest complete
   checkpoint;
5. trains an uninterrupted run and prints the verdict: whether every step's global batch of sample ids
   matches, and the checkpoint paths. Exit status 0 only when they are identical.

Run it with ``scripts/main-job`` (which creates the environment first), or directly with
``python examples/lightning/main_job.py [--work-dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from example_data import STREAM_SIZES, write_example_data  # noqa: E402

DEFAULT_WORK_DIR = "/tmp/stream-plugin-main-job"  # the root the shipped config.yaml names
GLOBAL_BATCH = 8
SIGNAL_AT = (1, 10)  # (epoch, batch) after which rank 0 gets SIGTERM: mid-epoch, in a later epoch
RUN_TIMEOUT = 300
MARKER = ".stream-plugin-main-job"


def prepare_work_dir(work: Path) -> None:
    """Empty ``work`` for a new run, but only a folder this job made (it holds MARKER) or an empty one."""
    if work.exists() and any(work.iterdir()) and not (work / MARKER).exists():
        raise SystemExit(
            f"main job: expected --work-dir to be new, empty or made by an earlier main job, found {work} holding "
            "other files; pass another folder"
        )
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / MARKER).write_text("made by examples/lightning/main_job.py; emptied by its next run\n")


def write_config(work: Path) -> Path:
    """The shipped config with its data paths moved under ``work``."""
    text = (HERE / "config.yaml").read_text().replace(DEFAULT_WORK_DIR, str(work))
    config = yaml.safe_load(text)
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def trainer_command(config: Path, devices: int, run_name: str, *extra: str) -> list[str]:
    strategy = "ddp" if devices > 1 else "auto"
    return [
        sys.executable,
        str(HERE / "train.py"),
        "fit",
        "--config",
        str(config),
        f"--trainer.devices={devices}",
        f"--trainer.strategy={strategy}",
        f"--model.run_name={run_name}",
        *extra,
    ]


def start(command: list[str], cwd: Path) -> subprocess.Popen[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    # Its own session: on a timeout we end exactly the processes this job started (ranks, workers).
    return subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def finish(process: subprocess.Popen[str], log: Path, seen: list[str]) -> int:
    try:
        rest, _ = process.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        rest, _ = process.communicate()
        log.write_text("".join(seen) + rest)
        raise SystemExit(f"main job: a run took longer than {RUN_TIMEOUT}s; its output is in {log}") from None
    log.write_text("".join(seen) + rest)
    return process.returncode


def run_to_end(command: list[str], cwd: Path, log: Path) -> int:
    return finish(start(command, cwd), log, [])


def run_and_preempt(command: list[str], cwd: Path, log: Path) -> int:
    """Start the DDP run, SIGTERM rank 0 once it reports SIGNAL_AT, and return its exit status."""
    process = start(command, cwd)
    assert process.stdout is not None
    seen: list[str] = []
    for line in process.stdout:  # blocks on the run's own progress lines: no polling
        seen.append(line)
        if line.startswith("progress "):
            epoch, batch = (int(part) for part in line.split()[1:])
            if (epoch, batch) >= SIGNAL_AT:
                os.kill(process.pid, signal.SIGTERM)  # rank 0, as a scheduler would
                print(f"      SIGTERM sent to rank 0 (pid {process.pid}) after epoch {epoch}, batch {batch}")
                break
    return finish(process, log, seen)


def read_steps(records: Path, run_name: str) -> dict[int, dict[str, Any]]:
    """step -> {"epoch", "batch", "ids"}: the global batch is rank 0's ids, then rank 1's, ..."""
    files = sorted(
        records.glob(f"{run_name}-rank*.jsonl"), key=lambda path: int(path.stem.rsplit("rank", 1)[1])
    )
    steps: dict[int, dict[str, Any]] = {}
    for path in files:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            entry = steps.setdefault(
                record["step"], {"epoch": record["epoch"], "batch": record["batch"], "ids": []}
            )
            entry["ids"].extend(record["ids"])
    return steps


def chain(*runs: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """A resumed run replaces every step from its first one on (steps trained again after a restore)."""
    merged: dict[int, dict[str, Any]] = {}
    for steps in runs:
        if steps:
            merged = {step: entry for step, entry in merged.items() if step < min(steps)}
            merged.update(steps)
    return dict(sorted(merged.items()))


def first_difference(found: dict[int, dict[str, Any]], expected: dict[int, dict[str, Any]]) -> str | None:
    if sorted(found) != sorted(expected):
        return f"the runs trained different steps: {len(found)} vs {len(expected)} (uninterrupted)"
    for step, entry in expected.items():
        if found[step] != entry:
            return f"step {step}: uninterrupted {entry}, preempted + resumed {found[step]}"
    return None


def describe_checkpoint(path: Path) -> str:
    state = (
        torch.load(path, weights_only=True, map_location="cpu").get("StreamingDataModule", {}).get("train")
    )
    if not state:
        return ""
    return f"(data at epoch {state['epoch']}, sample {state['sample_in_epoch']} = batch {state['sample_in_epoch'] // GLOBAL_BATCH})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work-dir", default=DEFAULT_WORK_DIR, help="emptied first; default %(default)s")
    work = Path(parser.parse_args().work_dir).resolve()
    prepare_work_dir(work)
    began = time.monotonic()
    print(f"stream_plugin Lightning main job; work folder {work}")

    shards = write_example_data(work / "remote")
    config = write_config(work)
    sizes = ", ".join(f"{name} {size} samples / {shards[name]} shards" for name, size in STREAM_SIZES.items())
    print(f"1/5 wrote the remote {(work / 'remote').as_uri()}: {sizes}; val {shards['val']} shards")
    print(f"    config: {config}")

    preempted_dir = work / "preempted"
    print(f"2/5 training with Lightning DDP on 2 CPU processes (global batch {GLOBAL_BATCH} = 4 x 2)")
    print(f"3/5 ... with a SIGTERM to rank 0 after epoch {SIGNAL_AT[0]}, batch {SIGNAL_AT[1]}")
    first = trainer_command(config, 2, "preempted", "--model.print_progress=true", "--model.step_delay=0.02")
    status = run_and_preempt(first, preempted_dir, preempted_dir / "preempted.log")
    last = preempted_dir / "checkpoints" / "last.ckpt"
    saved = describe_checkpoint(last) if last.exists() else "MISSING"
    print(f"      exit status {status} (expected 143); preemption checkpoint {last} {saved}")

    print(f"4/5 the same command on 1 process (global batch {GLOBAL_BATCH} = 8 x 1)")
    resumed_status = run_to_end(
        trainer_command(config, 1, "resumed"), preempted_dir, preempted_dir / "resumed.log"
    )
    resumed_from = [
        line
        for line in (preempted_dir / "resumed.log").read_text().splitlines()
        if line.startswith("resuming from")
    ]
    print(f"      exit status {resumed_status}; {resumed_from[0] if resumed_from else 'did not resume'}")

    print("5/5 an uninterrupted run on 1 process, for comparison")
    reference_dir = work / "uninterrupted"
    reference_status = run_to_end(
        trainer_command(config, 1, "uninterrupted"), reference_dir, reference_dir / "uninterrupted.log"
    )

    expected = read_steps(reference_dir / "records", "uninterrupted")
    found = chain(
        read_steps(preempted_dir / "records", "preempted"), read_steps(preempted_dir / "records", "resumed")
    )
    difference = first_difference(found, expected) if expected else "the uninterrupted run recorded nothing"
    problems = [
        message
        for failed, message in (
            (
                status != 143,
                f"the preempted run exited {status}, expected 143 (see {preempted_dir / 'preempted.log'})",
            ),
            (
                resumed_status != 0,
                f"the resumed run exited {resumed_status} (see {preempted_dir / 'resumed.log'})",
            ),
            (not resumed_from, "the second run did not resume from a checkpoint"),
            (reference_status != 0, f"the uninterrupted run exited {reference_status}"),
            (difference is not None, f"sample ids differ: {difference}"),
        )
        if failed
    ]
    print(
        "checkpoints (oldest first; the resumed run's ModelCheckpoint(save_last=True) rewrote last.ckpt at the end):"
    )
    for path in sorted(
        (preempted_dir / "checkpoints").glob("*.ckpt"), key=lambda path: path.stat().st_mtime_ns
    ):
        print(f"    {path} {describe_checkpoint(path)}")
    print(
        f"logs: {preempted_dir / 'preempted.log'}, {preempted_dir / 'resumed.log'}, {reference_dir / 'uninterrupted.log'}"
    )
    if problems:
        print("verdict: NOT identical")
        for message in problems:
            print(f"    {message}")
        return 1
    samples = sum(len(entry["ids"]) for entry in expected.values())
    epochs = len({entry["epoch"] for entry in expected.values()})
    print(f"verdict: identical: {samples} samples across {epochs} epochs ({time.monotonic() - began:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
