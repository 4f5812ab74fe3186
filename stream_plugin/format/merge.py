"""``merge_index``: join the indexes of datasets written in parallel into one index (MosaicML 0.13's API).

Each sub-dataset lives in a sub-folder of ``out``; the merged ``out/index.json`` lists their shards in
order, with basenames prefixed by the sub-folder (``"3/shard.00000.mds"``). Shard files are not moved.
The merged file is written as MosaicML writes it (``{"version": 2, "shards": [...]}``, keys in that
order), atomically, and uploaded when ``out`` has a remote part.
"""

from __future__ import annotations

import copy
import json
import os
import posixpath
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stream_plugin.errors import ConfigError
from stream_plugin.fileio import atomic_write_bytes
from stream_plugin.format.index import INDEX_BASENAME, INDEX_VERSION, parse_index
from stream_plugin.storage import open_store, split_out
from stream_plugin.storage.download_settings import DOWNLOAD_DEFAULTS
from stream_plugin.storage.local import local_root
from stream_plugin.storage.registry import check_storage_options

__all__ = ["merge_index", "merge_index_files", "merge_index_folder"]

IndexLocation = str | os.PathLike[str] | tuple[str, str]
_FILE_KEYS = ("raw_data", "zip_data", "raw_meta", "zip_meta")


def merge_index(*args: Any, **kwargs: Any) -> None:
    """Merge sub-dataset indexes into ``out/index.json``.

    Two call forms, as in MosaicML Streaming 0.13:

    * ``merge_index(index_file_urls, out, keep_local=True, download_timeout=...)``: the given index files
      (local paths, remote URLs, or ``(local, remote)`` pairs), in the order given;
    * ``merge_index(out, keep_local=True, download_timeout=...)``: every sub-folder of ``out`` that holds
      an index.json, in natural order (``2`` before ``10``).

    ``download_timeout`` (seconds per remote index read) defaults to a stream's (``DOWNLOAD_DEFAULTS``).
    ``storage_options=`` (a keyword, our own) go to every remote store it opens (an endpoint, credentials).
    """
    first = args[0] if args else kwargs.get("index_file_urls", kwargs.get("out"))
    if isinstance(first, list) or "index_file_urls" in kwargs:
        merge_index_files(*args, **kwargs)
    elif isinstance(first, (str, os.PathLike, tuple)):
        merge_index_folder(*args, **kwargs)
    else:
        raise ConfigError(
            f"merge_index: expected (index_file_urls: list, out, ...) or (out: str | tuple, ...), found "
            f"{type(first).__name__} {first!r:.80} first; pass a list of index files or the output folder"
        )


def merge_index_files(
    index_file_urls: Sequence[IndexLocation],
    out: str | tuple[str, str],
    keep_local: bool = True,
    download_timeout: float = DOWNLOAD_DEFAULTS.download_timeout,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Merge the given index files, in order, into ``out/index.json``."""
    options = check_storage_options(storage_options)
    local, remote = _split(out)
    locations = list(dict.fromkeys(_normalize(url) for url in index_file_urls))
    if not locations:
        raise ConfigError(
            f"merge_index: expected at least one index file to merge into {out!r}, found none; pass the "
            "index.json paths or URLs of the sub-datasets"
        )
    shards: list[dict[str, Any]] = []
    for location in locations:
        text, prefix = _read_sub_index(location, local, remote, timeout=download_timeout, options=options)
        shards.extend(_prefixed_shards(text, prefix, source=str(location)))
    _publish(shards, local, remote, keep_local=keep_local, options=options)


def merge_index_folder(
    out: str | tuple[str, str],
    keep_local: bool = True,
    download_timeout: float = DOWNLOAD_DEFAULTS.download_timeout,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Merge the index.json of every sub-folder of ``out`` (natural order) into ``out/index.json``."""
    local, remote = _split(out)
    found: list[IndexLocation] = []
    if local is not None and local.is_dir():
        folders = [child.name for child in local.iterdir() if (child / INDEX_BASENAME).is_file()]
        found = [str(local / name / INDEX_BASENAME) for name in sorted(folders, key=natural_key)]
    if not found and remote is not None:
        keys = [
            key
            for key in open_store(remote, **check_storage_options(storage_options)).list()
            if key.count("/") == 1 and key.endswith(f"/{INDEX_BASENAME}")
        ]
        found = [f"{remote.rstrip('/')}/{key}" for key in sorted(keys, key=natural_key)]
    if not found:
        raise ConfigError(
            f"merge_index: expected sub-folders of {out!r} that hold an {INDEX_BASENAME}, found none; write "
            "each part with out=<out>/<part> first, or pass the list of index files"
        )
    merge_index_files(
        found, out, keep_local=keep_local, download_timeout=download_timeout, storage_options=storage_options
    )


def natural_key(text: str) -> list[Any]:
    """Sort key that orders digit runs by value: ``"2" < "10"``, ``"part2" < "part10"``."""
    # re.split with a group alternates text (even positions) and digit runs (odd), so types align.
    return [int(token) if i % 2 else token for i, token in enumerate(re.split(r"(\d+)", text))]


def _split(out: str | tuple[str, str]) -> tuple[Path | None, str | None]:
    local, remote = split_out(out)
    return (local_root(local) if local is not None else None), remote


def _normalize(url: IndexLocation) -> IndexLocation:
    if isinstance(url, tuple):
        return (url[0].rstrip("/").strip(), url[1].rstrip("/").strip())
    return os.fspath(url).rstrip("/").strip()


def _read_sub_index(
    location: IndexLocation,
    local: Path | None,
    remote: str | None,
    *,
    timeout: float,
    options: Mapping[str, Any],
) -> tuple[bytes, str]:
    """The bytes of one sub-index and the folder prefix its basenames get in the merged index."""
    if isinstance(location, tuple):
        location = location[0] if os.path.exists(location[0]) else location[1]
    _, url_remote = split_out(location)
    if url_remote is None:
        path = local_root(location)
        if path.is_dir():
            path = path / INDEX_BASENAME
        if not path.is_file():
            raise FileNotFoundError(
                f"merge_index: expected an index file at {path}, found none; check the path of the sub-dataset"
            )
        return path.read_bytes(), _prefix(
            path.parent.resolve().as_posix(), local.resolve().as_posix() if local else None
        )
    folder, name = posixpath.split(url_remote)
    if not name.endswith(".json"):
        folder, name = url_remote, INDEX_BASENAME
    with tempfile.TemporaryDirectory(prefix="stream_plugin-merge-") as scratch:
        target = Path(scratch) / INDEX_BASENAME
        open_store(folder, **options).download(name, target, timeout=timeout)
        return target.read_bytes(), _prefix(folder, remote)


def _prefix(folder: str, out_root: str | None) -> str:
    """The sub-folder path relative to ``out`` when inside it, else its last component (MosaicML's rule)."""
    folder = folder.rstrip("/")
    if out_root is not None:
        root = out_root.rstrip("/")
        if folder.startswith(f"{root}/"):
            return folder[len(root) + 1 :]
    return posixpath.basename(folder)


def _prefixed_shards(text: bytes, prefix: str, *, source: str) -> list[dict[str, Any]]:
    entries = parse_index(text, source=source)  # validates version, entries and basenames
    shards = []
    for entry in entries:
        shard = copy.deepcopy(dict(entry.config))
        for key in _FILE_KEYS:
            if shard.get(key):
                shard[key]["basename"] = posixpath.join(prefix, shard[key]["basename"])
        shards.append(shard)
    return shards


def _publish(
    shards: list[dict[str, Any]],
    local: Path | None,
    remote: str | None,
    *,
    keep_local: bool,
    options: Mapping[str, Any],
) -> None:
    """Write the merged index locally (a scratch folder when there is none) and upload it."""
    # Key order and spacing exactly as MosaicML's merge_index dumps it.
    data = json.dumps({"version": INDEX_VERSION, "shards": shards}).encode("utf-8")
    if local is not None:
        atomic_write_bytes(local / INDEX_BASENAME, data, durable=True)
    if remote is None:
        return
    store = open_store(remote, **options)
    if local is not None:
        store.upload(local / INDEX_BASENAME, INDEX_BASENAME)
        if not keep_local:
            (local / INDEX_BASENAME).unlink(missing_ok=True)
        return
    with tempfile.TemporaryDirectory(prefix="stream_plugin-merge-") as scratch:
        path = Path(scratch) / INDEX_BASENAME
        path.write_bytes(data)
        store.upload(path, INDEX_BASENAME)
