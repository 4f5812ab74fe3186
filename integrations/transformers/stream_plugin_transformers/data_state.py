"""The data position inside a Hugging Face ``checkpoint-N`` folder: one small JSON file, written last.

The file holds ``StreamingDataLoader.state_dict()``: plain ints and strs, one global state whatever the
number of ranks or workers, so a run resumes on another number of processes. It is written by the main
process after the Trainer's own files (``on_save``), through a temporary file and an atomic rename, so
a checkpoint folder that has it is complete (``latest_checkpoint``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from stream_plugin.errors import StateError

DATA_STATE_FILE = "stream_plugin_data_state.json"

_CHECKPOINT_FOLDER = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_folder(output_dir: str | os.PathLike[str] | None, global_step: int) -> Path:
    """The Trainer's own folder for the checkpoint of ``global_step`` (``<output_dir>/checkpoint-N``)."""
    return Path(output_dir if output_dir is not None else "trainer_output") / f"checkpoint-{global_step}"


def write_data_state(folder: str | os.PathLike[str], state: dict[str, int | str]) -> Path:
    """Write ``state`` into the checkpoint ``folder`` atomically; the path written."""
    path = Path(folder) / DATA_STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{DATA_STATE_FILE}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(state, sort_keys=True))
    os.replace(temporary, path)
    return path


def read_data_state(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The data state saved in the checkpoint ``folder``; ``StateError`` (with the fix) when it has none."""
    path = Path(folder) / DATA_STATE_FILE
    if not path.is_file():
        raise StateError(
            f"resume_from_checkpoint: expected the data position {DATA_STATE_FILE} in {folder}, found none; "
            "the checkpoint was saved without StreamingTrainer (or its save was cut short): resume from a "
            "checkpoint it saved (latest_checkpoint(output_dir) picks the last complete one), or start afresh"
        )
    state = json.loads(path.read_text())
    if not isinstance(state, dict):
        raise StateError(
            f"{path}: expected a JSON object (a StreamingDataLoader state), found {type(state).__name__}"
        )
    return state


def latest_checkpoint(output_dir: str | os.PathLike[str]) -> str | None:
    """The last complete ``checkpoint-N`` folder in ``output_dir`` (one with its data position), or None.

    Pass it to ``train(resume_from_checkpoint=...)``: the same command then starts afresh or resumes.
    """
    root = Path(output_dir)
    if not root.is_dir():
        return None
    steps = []
    for child in root.iterdir():
        match = _CHECKPOINT_FOLDER.match(child.name)
        if match and (child / DATA_STATE_FILE).is_file():
            steps.append((int(match.group(1)), child))
    return str(max(steps)[1]) if steps else None
