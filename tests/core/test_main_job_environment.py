"""What scripts/main-job installs: torch and the lightning extra in .venv-job, never the test environment.

scripts/main-job runs in a copy of the repository's scripts with a stub Python (PYTHON_BIN) that logs
each call and makes a venv folder when asked, and a stub npm: no pip, no network, well under a second.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from support.paths import REPO_DIR

_STUB = """#!/usr/bin/env bash
# Logs "program<TAB>arg<TAB>arg..." (program relative to the working folder, the repository) and, for
# `-m venv DIR`, makes DIR/bin/python a copy of itself.
{ printf '%s' "${0#"$PWD/"}"; printf '\\t%s' "$@"; echo; } >> "$STUB_LOG"
if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
if [ "$1" = -c ] && [ -n "${STUB_FAIL_IMPORTS:-}" ]; then exit 1; fi
"""


def _repo_copy(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts" / "lib").mkdir(parents=True)
    for name in ("pyproject.toml", "scripts/main-job", "scripts/lib/venv.sh"):
        shutil.copy2(REPO_DIR / name, repo / name)
    return repo


def _stub(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_STUB)
    path.chmod(0o755)
    return path


def _venv_sh(repo: Path, expression: str) -> str:
    """The value of a shell expression after sourcing the copy's scripts/lib/venv.sh."""
    script = f"source scripts/lib/venv.sh && echo {expression}"
    return subprocess.run(
        ["bash", "-c", script], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def _run_main_job(repo: Path, tmp_path: Path, *, fail_imports: bool = False) -> list[list[str]]:
    """Run scripts/main-job; return every logged call (program, args...) in order.

    fail_imports: the new environment's `python -c` (the import of the job's entry points) fails.
    """
    log = tmp_path / "calls.log"
    stub = _stub(tmp_path / "stubs" / "python")
    _stub(tmp_path / "stubs" / "npm")  # ensure_azurite would call it: logged, never run
    env = {
        **os.environ,
        "PYTHON_BIN": str(stub),
        "PATH": f"{stub.parent}{os.pathsep}{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "STUB_FAIL_IMPORTS": "1" if fail_imports else "",
    }
    subprocess.run(
        [str(repo / "scripts" / "main-job"), "--work-dir", "W"], env=env, check=not fail_imports, timeout=60
    )
    return [line.split("\t") for line in log.read_text().splitlines()]


def _pip_installs(calls: list[list[str]]) -> list[list[str]]:
    """The requirements of each `pip install` call, its `--` options dropped."""
    return [
        [arg for arg in call[4:] if not arg.startswith("--")]
        for call in calls
        if call[1:4] == ["-m", "pip", "install"]
    ]


def test_main_job_installs_main_torch_and_the_lightning_extra_only(tmp_path: Path) -> None:
    repo = _repo_copy(tmp_path)
    calls = _run_main_job(repo, tmp_path)
    assert calls[0][1:] == ["-m", "venv", ".venv-job"]
    main_torch = _venv_sh(repo, "$MAIN_TORCH")  # the one pin, shared with the test environment
    assert _pip_installs(calls) == [["pip"], [main_torch, "-e", ".[lightning]"]]
    assert calls[-2][:2] == [".venv-job/bin/python", "-c"] and "import main_job, train" in calls[-2][2]
    assert calls[-1] == [".venv-job/bin/python", "examples/lightning/main_job.py", "--work-dir", "W"]
    assert not (repo / ".tools").exists(), "the main job installed Azurite"
    assert not any(Path(call[0]).name == "npm" for call in calls)


def test_main_job_leaves_a_stale_test_environment_alone(tmp_path: Path) -> None:
    repo = _repo_copy(tmp_path)
    _stub(repo / ".venv" / "bin" / "python")
    (repo / ".venv" / ".stream-plugin-env").write_text("stale\n")
    calls = _run_main_job(repo, tmp_path)
    assert not any(".venv" in call[1:] or call[0].startswith(".venv/") for call in calls)
    assert (repo / ".venv" / ".stream-plugin-env").read_text() == "stale\n"
    assert calls[-1][0] == ".venv-job/bin/python"


def test_main_job_runs_in_a_current_test_environment_without_installing(tmp_path: Path) -> None:
    repo = _repo_copy(tmp_path)
    _stub(repo / ".venv" / "bin" / "python")
    (repo / ".venv" / ".stream-plugin-env").write_text(_venv_sh(repo, "$(_env_key)") + "\n")
    calls = _run_main_job(repo, tmp_path)
    assert calls == [[".venv/bin/python", "examples/lightning/main_job.py", "--work-dir", "W"]]
    assert not (repo / ".venv-job").exists()


def test_the_test_environment_has_every_extra_of_the_main_job(tmp_path: Path) -> None:
    # Why a current .venv may stand in for .venv-job.
    repo = _repo_copy(tmp_path)
    job = set(_venv_sh(repo, "$JOB_EXTRAS").split(","))
    main = set(_venv_sh(repo, "$MAIN_EXTRAS").split(","))
    assert job == {"lightning"}
    assert job <= main


def test_a_job_environment_that_cannot_import_the_job_is_not_stamped(tmp_path: Path) -> None:
    repo = _repo_copy(tmp_path)
    calls = _run_main_job(repo, tmp_path, fail_imports=True)
    assert calls[-1][1] == "-c", "the job ran although its imports failed"
    assert (repo / ".venv-job" / "bin" / "python").exists()
    assert not (repo / ".venv-job" / ".stream-plugin-env").exists()


def test_a_stamped_job_environment_is_used_without_installing(tmp_path: Path) -> None:
    repo = _repo_copy(tmp_path)
    _run_main_job(repo, tmp_path)
    (tmp_path / "calls.log").unlink()
    calls = _run_main_job(repo, tmp_path)
    assert calls == [[".venv-job/bin/python", "examples/lightning/main_job.py", "--work-dir", "W"]]
