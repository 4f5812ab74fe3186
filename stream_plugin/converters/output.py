"""Where a conversion in parts writes: one sub-folder per part under ``out``, merged at the end.

Each part (a Spark partition, a local worker's slice of the inputs) is written by its own MDSWriter to
``out/<part>``, uploading to ``remote/<part>`` as it goes. Only after every part has finished does
``merge_index`` write the top-level ``index.json``, so a conversion that fails leaves none and no
reader ever sees it half done. A part that is written again (a retried task) replaces its own
sub-folder: the folder is named by the part, never by the attempt.
"""

from __future__ import annotations

import inspect
import os
import posixpath
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stream_plugin.errors import ConfigError
from stream_plugin.format import mds
from stream_plugin.format.compression import parse_compression
from stream_plugin.format.hashing import check_hash_names
from stream_plugin.format.index import INDEX_BASENAME, parse_index
from stream_plugin.format.merge import merge_index_files
from stream_plugin.format.writer import MDSWriter
from stream_plugin.format.writer_base import OutputExistsError, ShardWriter, check_size_limit
from stream_plugin.storage import open_store, split_out
from stream_plugin.storage.local import local_root


def writer_option_names() -> frozenset[str]:
    """The keyword arguments MDSWriter takes (``out``, ``columns``, ``compression``, ...)."""
    names = set(inspect.signature(MDSWriter.__init__).parameters)
    names |= set(inspect.signature(ShardWriter.__init__).parameters)
    return frozenset(names - {"self", "kwargs"})


def check_writer_options(options: Mapping[str, Any], *, caller: str) -> None:
    """Validate MDSWriter options once, up front, so no worker fails on a typo hours in."""
    unknown = sorted(set(options) - writer_option_names())
    if unknown:
        raise ConfigError(
            f"{caller}: expected MDSWriter options among {sorted(writer_option_names())}, found {unknown} "
            "(Invalid Writer argument(s)); remove or rename them"
        )
    if "columns" in options:
        mds.columns_for_writer(options["columns"])
    parse_compression(options.get("compression") or None)
    check_hash_names(list(options.get("hashes") or []))
    check_size_limit(options.get("size_limit", 1 << 26))


@dataclass(frozen=True)
class PartedOutput:
    """The resolved output of a conversion in parts: a local root (temporary for a remote-only ``out``)."""

    local: str
    remote: str | None
    temporary_local: bool

    def part_out(self, part: str) -> str | tuple[str, str]:
        """The ``out`` of the writer of one part."""
        local = os.path.join(self.local, part)
        return local if self.remote is None else (local, posixpath.join(self.remote, part))

    def part_index(self, part: str) -> tuple[str, str]:
        """``(local index path, remote index URL or '')`` of one part, as MosaicML's tasks report them."""
        remote = posixpath.join(self.remote, part, INDEX_BASENAME) if self.remote is not None else ""
        return os.path.join(self.local, part, INDEX_BASENAME), remote

    @property
    def mds_path(self) -> tuple[str, str]:
        """What MosaicML's ``dataframe_to_mds`` returns: ``(local, remote or '')``."""
        return self.local, self.remote or ""


def prepare_output(out: str | tuple[str, str], *, exist_ok: bool, caller: str) -> PartedOutput:
    """Resolve ``out`` and make sure no earlier dataset's top-level index can survive this conversion."""
    local, remote = split_out(out)
    if remote is not None and open_store(remote).exists(INDEX_BASENAME):
        raise OutputExistsError(
            f"{caller}: expected no dataset at {remote}, found an {INDEX_BASENAME} there; delete the remote "
            "folder or choose another out, so that a failed conversion cannot leave the old index in place"
        )
    if local is None:
        return PartedOutput(tempfile.mkdtemp(prefix="stream_plugin-convert-"), remote, temporary_local=True)
    root = local_root(local)
    if root.is_dir() and any(root.iterdir()):
        if not exist_ok:
            raise OutputExistsError(
                f"{caller}: expected an empty or new output folder, found {root} holds files (Directory is "
                "not empty); pass "
                "exist_ok=True in the writer options to replace them, or choose another folder"
            )
        (root / INDEX_BASENAME).unlink(missing_ok=True)  # first: no reader sees old and new mixed
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    # A file:// URL becomes its path, so the parts' index files can be found by path.
    return PartedOutput(local if not local.startswith("file:") else str(root), remote, temporary_local=False)


def part_stored_bytes(output: PartedOutput, part: str) -> int:
    """Bytes of the stored shard files of one finished part, from its index.json."""
    local_index, remote_index = output.part_index(part)
    if os.path.isfile(local_index):
        text = Path(local_index).read_bytes()
    elif remote_index:
        text = open_store(posixpath.dirname(remote_index)).read_bytes(INDEX_BASENAME)
    else:
        return 0
    entries = parse_index(text, source=local_index)
    return sum((pair[1] or pair[0]).bytes for entry in entries for pair in entry.file_pairs())


def merge_parts(output: PartedOutput, parts: Sequence[str], *, keep_local: bool) -> None:
    """Write the top-level index over ``parts``, in the order given."""
    out: str | tuple[str, str] = output.local if output.remote is None else (output.local, output.remote)
    merge_index_files([output.part_index(part) for part in parts], out, keep_local=keep_local)


def drop_local_copy(output: PartedOutput, *, keep_local: bool) -> None:
    """Remove the local folder of a remote output unless the caller keeps it (MosaicML's ``keep_local``)."""
    if output.remote is not None and not keep_local:
        shutil.rmtree(output.local, ignore_errors=True)
