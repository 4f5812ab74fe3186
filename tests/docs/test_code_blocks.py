"""Every Python block of the README and of each documentation page runs as written, against a loopback
S3 (moto) and local folders.

Each page runs on its own (a fresh bucket and folder); its blocks run in order, each in a fresh
interpreter, so a block reads what earlier blocks of the page wrote. Only places are rewritten:
``s3://bucket/`` becomes the test's bucket, ``/cache/`` and ``/tmp/`` folders under the test's own
folder. A block that cannot run alone (it needs the reader's model) is marked with
``<!-- readme-test: fragment (why) -->`` on the line before it and is only compiled.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import README, page_id, pages, python_blocks
from support.s3_server import S3Bucket

from stream_plugin import MDSWriter

RUNNABLE = [page for page in pages() if any(not block.fragment for block in python_blocks(page.read_text()))]


def test_the_pages_have_runnable_blocks_and_marked_fragments() -> None:
    blocks = [block for page in pages() for block in python_blocks(page.read_text())]
    assert any(not block.fragment for block in python_blocks(README.read_text()))
    assert sum(not block.fragment for block in blocks) >= 5
    assert sum(block.fragment for block in blocks) >= 1


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_python_block_compiles(page: Path) -> None:
    for block in python_blocks(page.read_text()):
        compile(block.code, f"{page_id(page)}:{block.line}", "exec")


def _write_dataset(url: str, label: int) -> None:
    with MDSWriter(out=url, columns={"text": "str", "label": "int"}) as writer:
        for index in range(300):
            writer.write({"text": f"{label}-{index}", "label": label})


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE, ids=page_id)
def test_every_python_block_of_the_page_runs(
    page: Path, s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_bucket.endpoint_url)
    text = page.read_text()
    # The reading example names two datasets "written as in writing.md": write them.
    if "s3://bucket/web" in text:
        _write_dataset(s3_bucket.url("web"), 0)
        _write_dataset(s3_bucket.url("code"), 1)
    env = {**os.environ, **s3_bucket.credentials, "S3_ENDPOINT_URL": s3_bucket.endpoint_url}
    for block in python_blocks(text):
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
        assert result.returncode == 0, f"{page_id(page)}:{block.line} failed:\n{result.stderr[-3000:]}"
