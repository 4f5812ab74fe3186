"""latest_checkpoint: the Trainer's last complete ``checkpoint-N`` folder, so that a checkpoint whose save
was cut short (no data position written yet) is never resumed from."""

from __future__ import annotations

from pathlib import Path

from stream_plugin_transformers import DATA_STATE_FILE, latest_checkpoint


def _checkpoint(output_dir: Path, step: int, *, complete: bool) -> Path:
    folder = output_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    if complete:
        (folder / DATA_STATE_FILE).write_text('{"epoch": 0, "sample_in_epoch": 0}')
    return folder


def test_a_checkpoint_whose_save_was_cut_short_is_never_resumed_from(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 5, complete=True)
    newest_complete = _checkpoint(tmp_path, 40, complete=True)  # after checkpoint-5 by number, not by name
    _checkpoint(tmp_path, 60, complete=False)  # the Trainer's files written, the data position not yet
    (tmp_path / "checkpoint-80.tmp").mkdir()
    assert latest_checkpoint(tmp_path) == str(newest_complete)


def test_no_complete_checkpoint_means_a_fresh_start(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path / "not-yet-created") is None
    _checkpoint(tmp_path, 3, complete=False)
    assert latest_checkpoint(tmp_path) is None
