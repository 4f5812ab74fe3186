"""Rerunning a finished run: Composer's ValueError without ``ExitIfComplete``, a clean exit 0 with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from composer_inprocess import train_in_process

from stream_plugin_composer import ExitIfComplete


def test_rerunning_a_finished_run_raises_in_composer_and_exits_0_with_exit_if_complete(
    tiny_data: Path, tmp_path: Path
) -> None:
    train_in_process(tiny_data, tmp_path, max_duration="1ep", save_interval="1ep")
    final = str(tmp_path / "checkpoints" / "latest-rank0.pt")
    with pytest.raises(ValueError, match=r"The max_duration \(1ep\) is less than or equal to the elapsed training duration"):
        train_in_process(tiny_data, tmp_path, max_duration="1ep", load_path=final)
    with pytest.raises(SystemExit) as exited:
        train_in_process(tiny_data, tmp_path, max_duration="1ep", load_path=final, callbacks=[ExitIfComplete()])
    assert exited.value.code == 0


def test_exit_if_complete_lets_an_unfinished_run_train(tiny_data: Path, tmp_path: Path) -> None:
    train_in_process(tiny_data, tmp_path, max_duration="1ep", save_interval="1ep")
    final = str(tmp_path / "checkpoints" / "latest-rank0.pt")
    history = train_in_process(tiny_data, tmp_path, max_duration="2ep", load_path=final, callbacks=[ExitIfComplete()])
    assert [batch[0] for batch in history] == [0] * 25 + [1] * 25
