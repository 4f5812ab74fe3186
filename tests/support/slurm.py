"""A stand-in for SLURM's ``scontrol`` on ``PATH``, which records its arguments instead of requeueing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest


def fake_scontrol(folder: Path, monkeypatch: pytest.MonkeyPatch, job_id: str, status: int = 0) -> Path:
    """Run as SLURM job ``job_id`` with an ``scontrol`` that appends its arguments to the returned file
    and exits ``status``."""
    calls = folder / "scontrol-calls"
    fake = folder / "bin" / "scontrol"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit {status}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", job_id)
    return calls
