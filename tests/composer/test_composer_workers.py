"""DataLoader workers built by ``build_streaming_dataspec`` and SIGTERM.

Workers survive a preemption SIGTERM sent to the whole process group (tested end to end in
``test_composer_preemption.py``), yet a training process that exits with live workers (persistent
workers held until interpreter exit) must not hang: ``multiprocessing`` stops them with SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HOLD_WORKERS_AND_EXIT = textwrap.dedent(
    """
    import sys
    from stream_plugin_composer import build_streaming_dataspec

    spec = build_streaming_dataspec(
        device_batch_size=4,
        dataset={"remote": sys.argv[1], "local": sys.argv[2]},
        num_workers=2,
        persistent_workers=True,
    )
    batch = next(iter(spec.dataloader))  # workers stay alive: the loader keeps its iterator
    print("pids", *[worker.pid for worker in spec.dataloader._iterator._workers], flush=True)
    """
)


def test_a_process_holding_persistent_workers_exits_promptly(tiny_data: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", HOLD_WORKERS_AND_EXIT, str(tiny_data), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - started < 60
    for pid in done.stdout.split("pids", 1)[1].split():
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid), 0)  # the workers are gone too


def test_workers_ignore_a_sigterm_from_another_process(tiny_data: Path, tmp_path: Path) -> None:
    script = HOLD_WORKERS_AND_EXIT + "\nimport time\ntime.sleep(3)\nprint('alive', flush=True)\n"
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(tiny_data), str(tmp_path / "cache")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    pids = process.stdout.readline().split()[1:]
    for pid in pids:
        os.kill(int(pid), signal.SIGTERM)  # as a scheduler signalling the process group would
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0 and "alive" in out, err[-3000:]
