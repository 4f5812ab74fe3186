"""examples/lightning/make_data.py writes exactly the folders examples/lightning/config.yaml reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from stream_plugin.format.index import load_index

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning"


def _remotes(config: dict) -> list[str]:  # type: ignore[type-arg]
    data = config["data"]["init_args"]
    return [stream["remote"] for stream in data["train"]["streams"]] + [data["val"]["remote"]]


def test_make_data_writes_every_folder_the_config_names(tmp_path: Path) -> None:
    sys.path.insert(0, str(EXAMPLE))
    try:
        import make_data
    finally:
        sys.path.remove(str(EXAMPLE))
    config = yaml.safe_load((EXAMPLE / "config.yaml").read_text())
    remotes = _remotes(config)
    assert all(remote.startswith(make_data.DEFAULT_OUT.as_uri() + "/") for remote in remotes)

    out = tmp_path / "remote"
    result = subprocess.run(
        [sys.executable, str(EXAMPLE / "make_data.py"), "--out", str(out)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    for remote in remotes:
        folder = out / remote.rsplit("/", 1)[1]
        assert sum(entry.samples for entry in load_index(folder)) > 0
