"""Every Python block of the README runs as written, against a loopback S3 (moto) and local folders.

Blocks run in order, each in a fresh interpreter, so a block reads what earlier blocks wrote. Only
places are rewritten: ``s3://bucket/`` becomes the test's bucket, ``/cache/`` and ``/tmp/`` folders
under the test's own folder. A block that cannot run alone (it needs the reader's model) is marked
with ``<!-- readme-test: fragment (why) -->`` on the line before it and is only compiled.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.paths import REPO_DIR
from support.s3_server import S3Bucket

from stream_plugin import MDSWriter

README = REPO_DIR / "README.md"
FRAGMENT_MARK = "<!-- readme-test: fragment"
_BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.DOTALL)


@dataclass(frozen=True)
class Block:
    line: int
    code: str
    fragment: bool


def python_blocks(text: str) -> list[Block]:
    """The README's ```python blocks, with their line numbers and whether they are marked fragments."""
    return [
        Block(
            line=text.count("\n", 0, match.start("code")) + 1,
            code=match.group("code"),
            fragment=match.group("before").startswith(FRAGMENT_MARK),
        )
        for match in _BLOCK.finditer(text)
    ]


def test_the_readme_has_runnable_blocks_and_marked_fragments() -> None:
    blocks = python_blocks(README.read_text())
    assert sum(not block.fragment for block in blocks) >= 3
    assert sum(block.fragment for block in blocks) >= 1
    for block in blocks:
        compile(block.code, f"README.md:{block.line}", "exec")


def _write_dataset(url: str, label: int) -> None:
    with MDSWriter(out=url, columns={"text": "str", "label": "int"}) as writer:
        for index in range(300):
            writer.write({"text": f"{label}-{index}", "label": label})


@pytest.mark.slow
def test_every_readme_python_block_runs(
    s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    # The reading example names two datasets "written as above": write them.
    _write_dataset(s3_bucket.url("web"), 0)
    _write_dataset(s3_bucket.url("code"), 1)
    env = {**os.environ, **s3_bucket.credentials, "S3_ENDPOINT_URL": s3_bucket.endpoint_url}
    for block in python_blocks(README.read_text()):
        if block.fragment:
            continue
        code = (
            block.code.replace("s3://bucket/", f"s3://{s3_bucket.name}/")
            .replace('"/cache/', f'"{tmp_path}/cache/')
            .replace('"/tmp/', f'"{tmp_path}/')
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
        )
        assert result.returncode == 0, f"README.md:{block.line} failed:\n{result.stderr[-3000:]}"
