"""PreemptionCheckpoint in one process, with real signals; and the checkpoint-file helpers."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning_rig import Reference, assert_retraces, read_records, run
from support.slurm import fake_scontrol

from stream_plugin.errors import ConfigError
from stream_plugin_lightning import Preempted, PreemptionCheckpoint, is_complete_checkpoint, latest_checkpoint

pytestmark = pytest.mark.timeout(300)


def test_sigterm_finishes_the_step_saves_and_exits_143(reference: Reference, tmp_path: Path) -> None:
    handler_before = signal.getsignal(signal.SIGTERM)
    config = reference.run_config(tmp_path, "signalled", preemption=True, signal_at_step=30)
    with pytest.raises(Preempted) as raised:
        run(config)

    assert raised.value.code == 143
    assert raised.value.checkpoint == str(Path(config.checkpoints) / "last.ckpt")
    assert signal.getsignal(signal.SIGTERM) == handler_before  # the Trainer's teardown restored it
    trained = read_records(Path(config.records), "signalled")
    assert max(trained) == 30  # the signalled step finished, no other started
    state = torch.load(raised.value.checkpoint, weights_only=True)["StreamingDataModule"]["train"]
    assert (state["epoch"], state["sample_in_epoch"]) == (1, 6 * 8)

    restarted = reference.run_config(tmp_path, "restarted", ckpt_path=latest_checkpoint(config.checkpoints))
    run(restarted)
    resumed = read_records(Path(restarted.records), "restarted")
    assert_retraces(reference.steps, reference.steps, trained, resumed)


def test_sigterm_before_training_starts_still_exits_143(reference: Reference, tmp_path: Path) -> None:
    # During the sanity check Lightning's own handler is active; it stops with a SIGTERMException, which
    # exits 0 unless the callback corrects the status. Nothing was trained, so nothing is saved.
    config = reference.run_config(tmp_path, "early", preemption=True, signal_at_step=-1)
    with pytest.raises(SIGTERMException) as raised:
        run(config)
    assert raised.value.code == 143
    assert not Path(config.records, "early-rank0.jsonl").exists()


def test_sigusr1_under_slurm_saves_and_requeues(
    reference: Reference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_scontrol(tmp_path, monkeypatch, "4242")
    config = reference.run_config(
        tmp_path, "slurm", preemption=True, signal_at_step=12, signal_number=signal.SIGUSR1
    )
    with pytest.raises(Preempted) as raised:
        run(config)
    assert (raised.value.code, raised.value.signum) == (143, signal.SIGUSR1)
    assert calls.read_text().split() == ["requeue", "4242"]


def test_default_signals_add_sigusr1_only_under_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert PreemptionCheckpoint().trapped_signals() == [signal.SIGTERM]
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    assert PreemptionCheckpoint().trapped_signals() == [signal.SIGTERM, signal.SIGUSR1]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"check_every_n_steps": 0}, "check_every_n_steps: expected a positive int or None, found 0"),
        ({"exit_code": 0}, r"exit_code: expected an int in \[1, 255\], found 0"),
        ({"filename": "a/last.ckpt"}, "filename: expected a plain file name"),
    ],
)
def test_bad_preemption_settings_are_rejected(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PreemptionCheckpoint(**arguments)


def test_latest_checkpoint_skips_truncated_and_temporary_files(reference: Reference, tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path / "missing") is None
    assert latest_checkpoint(tmp_path) is None  # a first run finds nothing and starts fresh
    whole = Path(reference.checkpoint("step=7.ckpt")).read_bytes()
    older, newer = tmp_path / "step=7.ckpt", tmp_path / "last.ckpt"
    older.write_bytes(whole)
    newer.write_bytes(whole[: len(whole) // 2])  # a write killed halfway
    (tmp_path / ".last.ckpt.tmp-saving").write_bytes(whole)
    os.utime(older, ns=(1_000_000_000, 1_000_000_000))
    assert not is_complete_checkpoint(newer)
    assert latest_checkpoint(tmp_path) == str(older)
    newer.write_bytes(whole)
    assert latest_checkpoint(tmp_path) == str(newer)
