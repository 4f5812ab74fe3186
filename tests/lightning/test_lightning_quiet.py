"""The DataModule is quiet: no Lightning warnings about it, and a help line for every option."""

from __future__ import annotations

import inspect
import re
import sys
import warnings
from pathlib import Path

import lightning.pytorch as pl
import pytest
from lightning_rig import RecordingModel, RunConfig, dataset_specs

from stream_plugin_lightning import StreamingDataModule

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_fit_without_a_val_set_triggers_no_lightning_warning(
    lightning_data: Path, tmp_path: Path, num_workers: int
) -> None:
    config = RunConfig(
        remote=str(lightning_data / "remote"),
        cache=str(tmp_path / "cache"),
        records=str(tmp_path / "records"),
        checkpoints=str(tmp_path / "checkpoints"),
        tag="quiet",
        max_epochs=1,
    )
    Path(config.records).mkdir()
    specs = dataset_specs(Path(config.remote), Path(config.cache))
    datamodule = StreamingDataModule(train=specs["train"], global_batch_size=8, num_workers=num_workers)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(RecordingModel(config), datamodule=datamodule)
    messages = [str(warning.message) for warning in caught]
    assert trainer.global_step == 25  # 200 samples / 8: the run happened
    assert not [message for message in messages if "across ranks is zero" in message], messages
    assert not [message for message in messages if "has `__len__` defined" in message], messages


def test_a_module_without_eval_sets_has_no_eval_hooks() -> None:
    datamodule = StreamingDataModule(train={"remote": "s3://b/a", "local": "/tmp/a"}, batch_size=2)
    from lightning.pytorch.utilities.model_helpers import is_overridden

    assert is_overridden("train_dataloader", datamodule)
    for hook in ("val_dataloader", "test_dataloader", "predict_dataloader"):
        assert not is_overridden(hook, datamodule)
    with_val = StreamingDataModule(val={"remote": "s3://b/v", "local": "/tmp/v"}, batch_size=2)
    assert is_overridden("val_dataloader", with_val)
    assert datamodule.predict_dataloader() == []  # called anyway: no loader
    datamodule.specs["predict"] = with_val.specs["val"]  # a split added later gets its hook
    assert is_overridden("predict_dataloader", datamodule)


def test_every_datamodule_option_has_its_own_help_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setattr(sys, "argv", ["train.py"])
    import train

    with pytest.raises(SystemExit):
        train.main(["fit", "--data.help", "stream_plugin_lightning.StreamingDataModule"])
    shown = capsys.readouterr().out
    options = [name for name in inspect.signature(StreamingDataModule.__init__).parameters if name != "self"]
    # An option's entry: "--data.NAME METAVAR", then its help (on the same or the next lines), then "(type: ...".
    entries = {
        entry.split()[0]: " ".join(entry.split()[2:])
        for entry in re.split(r"\n  (?=--)", shown)
        if entry.startswith("--")
    }
    for option in options:
        help_text = entries[f"--data.{option}"].split("(type:")[0].strip()
        assert len(help_text) > 10, f"--data.{option} has no help text: {entries[f'--data.{option}']!r}"
