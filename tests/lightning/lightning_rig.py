"""The Lightning test rig: a tiny dataset, a model that records the sample ids it trains on, and ``run``.

``run(RunConfig)`` trains in this process; ``python lightning_rig.py '<RunConfig as JSON>'`` trains in a
fresh process (Lightning's DDP launcher re-runs that same command line for the other ranks). Every rank
appends one JSON line per training step to ``<records>/<tag>-rank<r>.jsonl``; ``read_records`` rebuilds
the global batch of every step from those files (rank 0's ids, then rank 1's), ``merge_runs`` chains
runs, each resumed run replacing the steps from its first one on, and ``assert_retraces`` compares such a
chain with the uninterrupted run through the shared ``support.resume`` helper.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, OnExceptionCheckpoint

from stream_plugin import MDSWriter
from stream_plugin_lightning import DatasetSpec, PreemptionCheckpoint, StreamingDataModule, StreamSpec

# Two streams with disjoint ids, so a global batch shows which stream each sample came from.
STREAMS = {"alpha": range(0, 120), "beta": range(1000, 1080)}
VAL_IDS = range(5000, 5036)
GLOBAL_BATCH = 8
STEPS_PER_EPOCH = 25  # epoch_size 200 / global batch 8
WATCHDOG_SECONDS = 150
STACKS_SIGNAL = signal.SIGUSR2  # finish_process asks a hung run for its stacks (SIGUSR1 is a preemption signal)
PROGRESS_PREFIX = "rig-step "


def write_dataset(root: Path) -> None:
    """Write the streams and a validation set as small MDS shards under ``root`` (the "remote")."""
    columns = {"id": "int", "x": "ndarray:float32", "y": "float32"}
    for name, ids in {**STREAMS, "val": VAL_IDS}.items():
        with MDSWriter(out=str(root / name), columns=columns, size_limit=1 << 10) as writer:
            for sample_id in ids:
                x = np.full(4, sample_id % 97 / 97.0, dtype=np.float32)
                writer.write({"id": sample_id, "x": x, "y": float(x.sum())})


def dataset_specs(remote: Path, cache: Path) -> dict[str, DatasetSpec]:
    """Train on a 60 / 40 mix of the two streams (shuffled); validate on the val set in order."""
    train = DatasetSpec(
        streams=[
            StreamSpec(remote=(remote / "alpha").as_uri(), local=str(cache / "alpha"), proportion=0.6),
            StreamSpec(remote=(remote / "beta").as_uri(), local=str(cache / "beta"), proportion=0.4),
        ],
        epoch_size=200,
        shuffle=True,
        shuffle_seed=17,
    )
    val = DatasetSpec(remote=(remote / "val").as_uri(), local=str(cache / "val"))
    return {"train": train, "val": val}


@dataclass
class RunConfig:
    """One training run. Paths are strings so the config travels as JSON to a subprocess."""

    remote: str
    cache: str
    records: str
    checkpoints: str
    tag: str
    devices: int = 1
    tensor_parallel: int = 1  # > 1: ModelParallelStrategy (devices / this, this) and TensorParallelModel
    replication: int | None = None  # the train DatasetSpec's
    num_workers: int = 0
    max_epochs: int = 3
    global_batch_size: int = GLOBAL_BATCH
    batch_size: int | None = None
    ckpt_path: str | None = None
    one_cycle: bool = False  # configure_optimizers reads trainer.estimated_stepping_batches
    every_step_checkpoints: bool = False  # a ModelCheckpoint per step plus two epoch-end ones
    manual_save_at_step: int | None = None  # trainer.save_checkpoint inside training_step
    fail_at_step: int | None = None  # raise in training_step (an on-exception checkpoint is written)
    preemption: bool = False
    check_every_n_steps: int | None = None  # None: PreemptionCheckpoint's default
    check_interval_s: float | None = None  # None: PreemptionCheckpoint's default
    step_delay: float = 0.0  # seconds per step, so a signal can land mid-epoch
    val: bool = True
    print_progress: bool = False
    signal_at_step: int | None = None  # this process sends itself a signal as that step starts
    signal_number: int = signal.SIGTERM
    signal_rank: int | None = None  # only this rank sends itself the signal (None: every rank)
    extra: dict[str, Any] = field(default_factory=dict)  # more StreamingDataModule arguments
    trainer_extra: dict[str, Any] = field(default_factory=dict)  # more Trainer arguments


class RecordingModel(pl.LightningModule):
    """A linear regressor that appends the ids of every training batch to a per-rank file."""

    def __init__(self, config: RunConfig) -> None:
        super().__init__()
        self.config = config
        self.layer = torch.nn.Linear(4, 1)
        self.val_ids: list[list[int]] = []

    def _append(self, record: dict[str, Any]) -> None:
        path = Path(self.config.records) / f"{self.config.tag}-rank{self.global_rank}.jsonl"
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        step = self.trainer.global_step
        if self.config.fail_at_step == step:
            raise RuntimeError(f"rig: planned failure at step {step}")
        if self.config.manual_save_at_step == step:
            self.trainer.save_checkpoint(Path(self.config.checkpoints) / f"manual-step{step}.ckpt")
        if self.config.step_delay:
            time.sleep(self.config.step_delay)
        ids = [int(sample_id) for sample_id in batch["id"]]
        self._append({"step": step, "epoch": self.current_epoch, "batch": batch_idx, "ids": ids})
        if self.config.print_progress and self.global_rank == 0:
            # A test waits on these lines to send a signal at a chosen point, without polling files.
            print(f"{PROGRESS_PREFIX}{self.current_epoch} {batch_idx}", flush=True)
        prediction = self.regress(batch["x"]).squeeze(-1)
        return torch.nn.functional.mse_loss(prediction, batch["y"])

    def regress(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        if batch_idx == 0:
            self.val_ids.append([])
        self.val_ids[-1].extend(int(sample_id) for sample_id in batch["id"])
        self.log("val_batches", float(batch_idx + 1), reduce_fx="max")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> list[int]:
        return [int(sample_id) for sample_id in batch["id"]]

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.01)
        if not self.config.one_cycle:
            return optimizer
        # The usual OneCycleLR recipe; it makes Lightning build the train loader early (issue 20550).
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.05, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class TensorParallelModel(RecordingModel):
    """``RecordingModel`` whose regressor is a two-layer MLP split over the mesh's tensor-parallel ranks
    (column-wise, then row-wise): each rank of a tensor-parallel group holds half of every layer, so the
    group's ranks must see the same batch."""

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.layer.requires_grad_(False)  # unused here: it would have no optimizer state to restore
        self.up = torch.nn.Linear(4, 8)
        self.down = torch.nn.Linear(8, 1)

    def configure_model(self) -> None:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
        parallelize_module(self, self.device_mesh["tensor_parallel"], plan)  # type: ignore[arg-type]

    def regress(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))

    def configure_optimizers(self) -> Any:
        # With momentum: Lightning 2.6 cannot load a full ModelParallelStrategy checkpoint whose optimizer
        # state is empty (plain SGD), _rekey_optimizer_state_if_needed indexes its first entry.
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


class _WriteMarker(Callback):
    """Records each rank's pid, so a test can signal the right process."""

    def __init__(self, records: str) -> None:
        self.records = records

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        Path(self.records, f"pid-rank{trainer.global_rank}").write_text(str(os.getpid()))


class SendSignal(Callback):
    """Sends this process a real signal as a chosen step starts (the step must still finish), or as the
    sanity check starts (``step=-1``), before PreemptionCheckpoint takes the signals over."""

    def __init__(self, step: int, signum: int = signal.SIGTERM, rank: int | None = None) -> None:
        self.step = step
        self.signum = signum
        self.rank = rank

    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.step == -1:
            os.kill(os.getpid(), self.signum)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step == self.step and self.rank in (None, trainer.global_rank):
            os.kill(os.getpid(), self.signum)


def build_callbacks(config: RunConfig) -> list[Callback]:
    callbacks: list[Callback] = [_WriteMarker(config.records)]
    if config.signal_at_step is not None:
        callbacks.append(SendSignal(config.signal_at_step, config.signal_number, config.signal_rank))
    if config.every_step_checkpoints:
        callbacks += [
            ModelCheckpoint(
                dirpath=config.checkpoints, filename="{step}", every_n_train_steps=1, save_top_k=-1
            ),
            ModelCheckpoint(
                dirpath=config.checkpoints,
                filename="trainend-{epoch}",
                every_n_epochs=1,
                save_on_train_epoch_end=True,
                save_top_k=-1,
            ),
            # A monitored metric only to give this one its own state key (the checkpoints must not share one).
            ModelCheckpoint(
                dirpath=config.checkpoints,
                filename="valend-{epoch}",
                monitor="val_batches",
                every_n_epochs=1,
                save_top_k=-1,
            ),
        ]
    if config.fail_at_step is not None:
        callbacks.append(OnExceptionCheckpoint(dirpath=config.checkpoints))
    if config.preemption:
        interval: dict[str, Any] = {
            name: value
            for name, value in (
                ("check_every_n_steps", config.check_every_n_steps),
                ("check_interval_s", config.check_interval_s),
            )
            if value is not None
        }
        callbacks.append(PreemptionCheckpoint(dirpath=config.checkpoints, **interval))
    return callbacks


def build_datamodule(config: RunConfig) -> StreamingDataModule:
    specs = dataset_specs(Path(config.remote), Path(config.cache))
    return StreamingDataModule(
        train=replace(specs["train"], replication=config.replication),
        val=specs["val"] if config.val else None,
        batch_size=config.batch_size,
        global_batch_size=config.global_batch_size,
        num_workers=config.num_workers,
        **config.extra,
    )


def build_strategy(config: RunConfig) -> Any:
    if config.tensor_parallel > 1:
        from lightning.pytorch.strategies import ModelParallelStrategy

        return ModelParallelStrategy(
            data_parallel_size=config.devices // config.tensor_parallel,
            tensor_parallel_size=config.tensor_parallel,
            save_distributed_checkpoint=False,  # one file, as PreemptionCheckpoint writes it
        )
    return "ddp" if config.devices > 1 else "auto"


def build_trainer(config: RunConfig) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=config.devices,
        strategy=build_strategy(config),
        max_epochs=config.max_epochs,
        callbacks=build_callbacks(config),
        logger=False,
        enable_checkpointing=config.every_step_checkpoints or config.fail_at_step is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=2 if config.val else 0,
        default_root_dir=config.checkpoints,
        **config.trainer_extra,
    )


def quiet() -> None:
    """Silence the warnings every run prints (few workers, read-only numpy arrays from zero-copy reads)."""
    for pattern in (
        ".*does not have many workers.*",
        ".*not writable.*",
        ".*sync_dist=True.*",
        ".*callbacks used to create the checkpoint.*",
        ".*has `__len__` defined.*",
        ".*LeafSpec.*",
    ):
        warnings.filterwarnings("ignore", message=pattern)


def run(config: RunConfig) -> tuple[RecordingModel, StreamingDataModule, pl.Trainer]:
    """Train as ``config`` says, in this process (and, for DDP, Lightning's child processes)."""
    quiet()
    Path(config.records).mkdir(parents=True, exist_ok=True)
    pl.seed_everything(0, verbose=False)
    model = TensorParallelModel(config) if config.tensor_parallel > 1 else RecordingModel(config)
    datamodule = build_datamodule(config)
    trainer = build_trainer(config)
    trainer.fit(model, datamodule=datamodule, ckpt_path=config.ckpt_path)
    return model, datamodule, trainer


def read_records(records: Path, tag: str, ranks: Sequence[int] | None = None) -> dict[int, dict[str, Any]]:
    """step -> {"epoch", "batch", "ids" (the global batch: rank 0's ids, then rank 1's, ...)} for one run;
    ``ranks``: only those ranks' files, in that order (one rank per data-parallel coordinate)."""
    per_rank = sorted(
        records.glob(f"{tag}-rank*.jsonl"), key=lambda path: int(path.stem.rsplit("rank", 1)[1])
    )
    if ranks is not None:
        per_rank = [records / f"{tag}-rank{rank}.jsonl" for rank in ranks]
    steps: dict[int, dict[str, Any]] = {}
    for path in per_rank:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            entry = steps.setdefault(
                record["step"], {"epoch": record["epoch"], "batch": record["batch"], "ids": []}
            )
            assert (entry["epoch"], entry["batch"]) == (record["epoch"], record["batch"]), (path, record)
            entry["ids"].extend(record["ids"])
    return steps


def merge_runs(*runs: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The steps of a chain of runs: each later run replaces every step from its first one on."""
    merged: dict[int, dict[str, Any]] = {}
    for steps in runs:
        if steps:
            first = min(steps)
            merged = {step: entry for step, entry in merged.items() if step < first}
            merged.update(steps)
    return dict(sorted(merged.items()))


def step_records(steps: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps in order, each record naming its step, epoch, batch and ids."""
    return [{"step": step, **steps[step]} for step in sorted(steps)]


def record_ids(record: dict[str, Any]) -> list[int]:
    return list(record["ids"])


def assert_retraces(
    expected: dict[int, dict[str, Any]], *runs: dict[int, dict[str, Any]], what: str = "the resumed run"
) -> None:
    """The chain of ``runs`` (see ``merge_runs``) trained exactly ``expected``'s global batches, at the
    same steps and (epoch, batch): ``support.resume.assert_same_output`` on the step records."""
    # Imported here: this module also runs as a script (a training process), without tests/ on sys.path.
    from support.resume import assert_same_output

    found = step_records(merge_runs(*runs))
    steps = [record["step"] for record in found]
    resumed_at = [steps.index(min(run)) for run in runs[1:] if run and min(run) in steps]
    assert_same_output(found, step_records(expected), what=what, ids=record_ids, checkpoints=resumed_at)


@dataclass(frozen=True)
class Reference:
    """The uninterrupted run: its global batches by step, val passes, and checkpoint folder."""

    config: RunConfig
    steps: dict[int, dict[str, Any]]
    val_passes: list[list[int]]
    checkpoints: Path

    def run_config(self, tmp_path: Path, tag: str, **changes: Any) -> RunConfig:
        """A config for another run on the same data, writing into ``tmp_path``."""
        plain: dict[str, Any] = {
            "every_step_checkpoints": False,
            "one_cycle": False,
            "manual_save_at_step": None,
        }
        return replace(
            self.config,
            records=str(tmp_path / "records"),
            checkpoints=str(tmp_path / "checkpoints"),
            tag=tag,
            **{**plain, **changes},
        )

    def checkpoint(self, name: str) -> str:
        path = self.checkpoints / name
        assert path.is_file(), (
            f"the reference run wrote no {name}; it has {sorted(self.checkpoints.iterdir())}"
        )
        return str(path)


def start_process(config: RunConfig) -> subprocess.Popen[str]:
    """Train in a fresh process (its own session, so a test can end the whole group it started)."""
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), json.dumps(asdict(config))],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_for_progress(process: subprocess.Popen[str], epoch: int, batch: int) -> list[str]:
    """Read the run's output until rank 0 reports (epoch, batch) or later; the lines read so far."""
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith(PROGRESS_PREFIX):
            seen_epoch, seen_batch = (int(part) for part in line[len(PROGRESS_PREFIX) :].split())
            if (seen_epoch, seen_batch) >= (epoch, batch):
                return lines
    raise AssertionError(f"the run ended before epoch {epoch}, batch {batch}:\n{''.join(lines)[-4000:]}")


def finish_process(process: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    """Wait for the run (its output drained) and return (exit status, output). On timeout, every process
    of its group (ranks and their DataLoader workers) first writes the stacks of all its threads
    (``STACKS_SIGNAL``, registered in ``main``), then the group is killed: a hang names where it hangs."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, STACKS_SIGNAL)
        try:
            output, _ = process.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"the run did not finish in {timeout}s:\n{output[-20000:]}") from None
    return process.returncode, output


def main(argv: list[str]) -> int:
    # A hang in a subprocess should leave stacks behind, not just a timeout: on its own after
    # WATCHDOG_SECONDS, and at once on STACKS_SIGNAL (finish_process sends it to the whole group; the
    # ranks run this too, and DataLoader workers forked from them inherit the handler).
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    faulthandler.register(STACKS_SIGNAL, all_threads=True)
    config = RunConfig(**json.loads(argv[1]))
    run(config)
    if torch.distributed.is_initialized():
        # Before the interpreter exits: gloo's threads can otherwise abort it at finalization
        # ("terminate called without an active exception"; pytorch/pytorch#179291).
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
