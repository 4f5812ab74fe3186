"""Everything the cache adds to ``local`` lives in ``local/.stream_plugin/`` (and a download in progress
is a hidden ``.<name>.tmp-*`` file), so that leaving those out, a warm cache of an uncompressed dataset
holds exactly the remote's files, byte for byte: the ``diff -r --exclude=...`` that docs/storage.md
gives."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from support.datasets import write_ids

from stream_plugin import StreamingDataset


def _files(root: Path, *, bookkeeping_left_out: bool) -> dict[str, bytes]:
    files = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if bookkeeping_left_out and (
            relative.parts[0] == ".stream_plugin" or fnmatch.fnmatch(path.name, ".*.tmp-*")
        ):
            continue
        if path.is_file():
            files[relative.as_posix()] = path.read_bytes()
    return files


def test_the_cache_adds_only_its_bookkeeping_folder_to_local(tmp_path: Path) -> None:
    remote = write_ids(tmp_path / "remote", range(64), size_limit=1 << 10)
    local = tmp_path / "local"
    dataset = StreamingDataset(
        remote=str(remote), local=str(local), batch_size=4, shuffle=True, cache_limit=1 << 20
    )
    assert sorted(int(sample["id"]) for sample in dataset) == list(range(64))
    dataset.node_stats()  # statistics, reservations and locks are written too
    assert (local / ".stream_plugin").is_dir()
    assert _files(local, bookkeeping_left_out=True) == _files(remote, bookkeeping_left_out=False)
