"""A writer that dies never leaves an index.json pointing at missing or partial shards."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.paths import REPO_DIR
from writer_rig import TEXT_COLUMNS, make_writer, read_dataset, text_samples, write_dataset

from stream_plugin.format.index import INDEX_BASENAME, load_index


def _visible_files(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if not path.name.startswith("."))


def _assert_every_visible_shard_is_complete(folder: Path) -> None:
    """A visible MDS file is whole: its last offset equals its size (renames publish only whole files)."""
    for name in _visible_files(folder):
        data = (folder / name).read_bytes()
        (count,) = struct.unpack_from("<I", data)
        (end,) = struct.unpack_from("<I", data, 4 + 4 * count)
        assert end == len(data), name


def _assert_index_is_absent_or_complete(folder: Path) -> None:
    if not (folder / INDEX_BASENAME).exists():
        return
    for entry in load_index(folder):
        assert (folder / entry.raw_data.basename).stat().st_size == entry.raw_data.bytes


def test_an_exception_in_the_with_block_writes_no_index(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="boom"),
        make_writer("mds", str(tmp_path), TEXT_COLUMNS, size_limit=300) as writer,
    ):
        for sample in text_samples(100):
            writer.write(sample)
        raise RuntimeError("boom")
    names = _visible_files(tmp_path)
    assert INDEX_BASENAME not in names and names  # complete shards stay, unlisted
    assert not [path for path in tmp_path.iterdir() if ".tmp-" in path.name]
    _assert_every_visible_shard_is_complete(tmp_path)


def test_a_failed_rewrite_with_exist_ok_leaves_no_index_of_the_old_dataset(tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path), text_samples(50), TEXT_COLUMNS, size_limit=300)
    with (
        pytest.raises(RuntimeError, match="boom"),
        make_writer("mds", str(tmp_path), TEXT_COLUMNS, exist_ok=True) as writer,
    ):
        writer.write(text_samples(1)[0])
        raise RuntimeError("boom")
    assert _visible_files(tmp_path) == []


def test_a_writer_can_be_rerun_over_a_crashed_one_with_exist_ok(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError),
        make_writer("mds", str(tmp_path), TEXT_COLUMNS, size_limit=300) as writer,
    ):
        writer.write(text_samples(1)[0])
        raise RuntimeError
    write_dataset("mds", str(tmp_path), text_samples(20), TEXT_COLUMNS, size_limit=300, exist_ok=True)
    assert read_dataset(tmp_path) == text_samples(20)


_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from stream_plugin.format.writer import MDSWriter

    out, exist_ok, stop = Path(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
    announced = False
    with MDSWriter(out=str(out), columns={"i": "int", "s": "str"}, size_limit=2048, exist_ok=exist_ok) as writer:
        i = 0
        while stop == 0 or i < stop:  # stop == 0: until killed
            writer.write({"i": i, "s": "x" * (i % 50)})
            i += 1
            if not announced and i % 100 == 0 and len(list(out.glob("shard.*.mds"))) >= 3:
                print("shards written", flush=True)
                announced = True
        print("finishing", flush=True)  # killed somewhere inside finish()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("over_old_dataset", "stop", "signal_line"),
    [(False, 0, "shards written"), (True, 0, "shards written"), (False, 3000, "finishing")],
)
def test_sigkill_leaves_no_index_pointing_at_partial_shards(
    over_old_dataset: bool, stop: int, signal_line: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    if over_old_dataset:
        write_dataset("mds", str(out), text_samples(200), TEXT_COLUMNS, size_limit=300)
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(out), "1" if over_old_dataset else "0", str(stop)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line == f"{signal_line}\n":
                break
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) in (-signal.SIGKILL, 0)  # 0: it finished before the signal
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if stop == 0:
        assert not (out / INDEX_BASENAME).exists()  # the old index went first; the new one was never due
    _assert_index_is_absent_or_complete(out)
    _assert_every_visible_shard_is_complete(out)
