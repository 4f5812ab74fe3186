"""LightningCLI: the shipped example YAML runs, ``--data`` takes our class path, and bad values are named."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from stream_plugin_lightning import (
    DatasetSpec,
    Preempted,
    PreemptionCheckpoint,
    StreamingDataModule,
    StreamSpec,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture()
def example(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The example's modules importable, its data written under ``tmp_path``, which is the working dir."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setattr(sys, "argv", ["train.py"])  # LightningCLI reads args=..., not pytest's arguments
    monkeypatch.chdir(tmp_path)
    import example_data
    import main_job

    example_data.write_example_data(tmp_path / "remote")
    return main_job.write_config(tmp_path)


def _cli(*args: str):  # type: ignore[no-untyped-def]
    import train

    return train.main(list(args))


def _steps(records: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (records / "cli-rank0.jsonl").read_text().splitlines()]


def test_the_example_yaml_trains_and_a_rerun_resumes_after_sigterm(
    example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One process, 2 epochs of 40 steps; the rig's SendSignal callback sends a real SIGTERM at step 50.
    common = [
        "--trainer.devices=1",
        "--trainer.strategy=auto",
        "--model.run_name=cli",
        "--trainer.max_epochs=2",
    ]
    signal_at_50 = ["--trainer.callbacks+=lightning_rig.SendSignal", "--trainer.callbacks.step=50"]
    with pytest.raises(Preempted) as raised:
        _cli("fit", "--config", str(example), *common, *signal_at_50, "--trainer.callbacks.signum=15")
    assert raised.value.code == 143
    assert "no checkpoint yet: starting fresh" in capsys.readouterr().out  # a first run: no error
    assert _steps(tmp_path / "records") == list(range(51))

    cli = _cli("fit", "--config", str(example), *common)  # the same command again
    assert f"resuming from {tmp_path / 'checkpoints' / 'last.ckpt'}" in capsys.readouterr().out
    assert _steps(tmp_path / "records") == list(range(80))  # continues at step 51, nothing repeated
    datamodule = cli.datamodule
    assert isinstance(datamodule, StreamingDataModule)
    train = datamodule.specs["train"]
    assert isinstance(train, DatasetSpec) and train.shuffle and train.epoch_size == 320
    assert [stream.proportion for stream in train.streams or []] == [0.5, 0.3, 0.2]
    assert all(isinstance(stream, StreamSpec) for stream in train.streams or [])
    assert any(isinstance(callback, PreemptionCheckpoint) for callback in cli.trainer.callbacks)


def test_data_class_path_and_typed_arguments_from_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    streams: list[dict[str, Any]] = [{"remote": "file:///data/a", "local": "/cache/a", "proportion": 0.25}]
    cli = _example_cli(
        monkeypatch,
        [
            "--data=stream_plugin_lightning.StreamingDataModule",
            "--data.global_batch_size=16",
            "--data.num_workers=2",
            f"--data.train={json.dumps({'streams': streams, 'shuffle': True})}",
        ],
    )
    datamodule = cli.datamodule
    assert isinstance(datamodule, StreamingDataModule)
    assert (datamodule.global_batch_size, datamodule.loader_options["num_workers"]) == (16, 2)
    assert datamodule.specs["train"] == DatasetSpec(streams=[StreamSpec(**streams[0])], shuffle=True)


def test_a_bad_option_is_rejected_with_the_choices(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setattr(sys, "argv", ["train.py"])
    import train
    from example_model import IdRecordingRegressor

    with pytest.raises(SystemExit):
        train.ResumingCLI(
            IdRecordingRegressor,
            run=False,
            args=[
                "--data=stream_plugin_lightning.StreamingDataModule",
                "--data.batch_size=4",
                '--data.train={"remote": "file:///data/a", "shuffle_algo": "py9"}',
            ],
        )
    error = capsys.readouterr().err
    assert "shuffle_algo" in error and "py1e" in error, error[-2000:]


def test_the_example_modules_are_not_left_on_the_path() -> None:
    assert str(EXAMPLE) not in sys.path


def test_zero_copy_takes_a_list_of_columns_from_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    cli = _example_cli(
        monkeypatch,
        [
            "--data=stream_plugin_lightning.StreamingDataModule",
            "--data.global_batch_size=16",
            '--data.train={"remote": "file:///data/a", "zero_copy": ["payload", "extra"]}',
            '--data.val={"remote": "file:///data/b", "zero_copy": true}',
        ],
    )
    datamodule = cli.datamodule
    assert isinstance(datamodule, StreamingDataModule)
    assert datamodule.specs["train"] == DatasetSpec(remote="file:///data/a", zero_copy=["payload", "extra"])
    assert datamodule.specs["val"] == DatasetSpec(remote="file:///data/b", zero_copy=True)


def _example_cli(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> Any:
    """The example's ``ResumingCLI`` over its model, parsed from ``args`` without running."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setattr(sys, "argv", ["train.py"])
    import train
    from example_model import IdRecordingRegressor

    return train.ResumingCLI(IdRecordingRegressor, run=False, save_config_callback=None, args=args)
