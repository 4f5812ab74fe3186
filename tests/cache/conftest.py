"""Tiny datasets on a local "remote" folder, and store wrappers that count, corrupt or slow downloads.

Shard contents are random bytes: the cache never looks inside a shard, only at the sizes and digests
``index.json`` records, so the tests need no real samples and stay fast.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.remotes import Remote

from stream_plugin.format.compression import compress
from stream_plugin.format.hashing import hash_data
from stream_plugin.format.index import ShardEntry, load_index, write_index
from stream_plugin.storage import LocalStore


def _file_info(basename: str, data: bytes, hashes: tuple[str, ...]) -> dict[str, object]:
    return {
        "basename": basename,
        "bytes": len(data),
        "hashes": {name: hash_data(name, data) for name in hashes},
    }


@dataclass
class Dataset:
    """A stream written into ``remote``: its entries and the raw bytes of every raw file."""

    remote: Path
    entries: list[ShardEntry]
    contents: dict[str, bytes]  # raw basename -> raw bytes (data and meta files)

    def assert_intact(self, local: Path, entries: list[ShardEntry] | None = None) -> None:
        """Every raw file of ``entries`` (default: all) is in ``local`` with its original bytes."""
        for entry in entries if entries is not None else self.entries:
            for raw, _ in entry.file_pairs():
                assert (local / raw.basename).read_bytes() == self.contents[raw.basename], raw.basename

    def cached_bytes(self, local: Path) -> int:
        """Bytes of this dataset's files (raw and compressed, final names only) present in ``local``."""
        total = 0
        for entry in self.entries:
            for raw, stored in entry.file_pairs():
                for info in (raw, stored):
                    if info is not None and (local / info.basename).is_file():
                        total += (local / info.basename).stat().st_size
        return total


def build_dataset(
    remote: Path,
    *,
    shards: int = 4,
    shard_bytes: int = 2000,
    compression: str | None = None,
    hashes: tuple[str, ...] = ("sha1",),
    prefix: str = "",
    shard_format: str = "mds",
    seed: int = 0,
) -> Dataset:
    """Write ``shards`` shards of random bytes (plus meta files for JSON) and their ``index.json``."""
    rng = random.Random(seed)
    remote.mkdir(parents=True, exist_ok=True)
    configs, contents = [], {}
    for index in range(shards):
        config: dict[str, object] = {
            "version": 2,
            "format": shard_format,
            "compression": compression,
            "hashes": list(hashes),
            "size_limit": None,
            "samples": 1,
        }
        suffixes = ("data", "meta") if shard_format == "json" else ("data",)
        for suffix in suffixes:
            basename = f"{prefix}shard.{index:05d}.{shard_format}" + (".meta" if suffix == "meta" else "")
            size = shard_bytes + rng.randrange(shard_bytes // 4 + 1) if suffix == "data" else 64
            # Half random, half repeated: compressible, yet every shard differs.
            data = rng.randbytes(size // 2) + bytes([index % 256]) * (size - size // 2)
            contents[basename] = data
            stored_name, stored_data = basename, data
            if compression is not None:
                stored_name, stored_data = (
                    f"{basename}.{compression.split(':')[0]}",
                    compress(compression, data),
                )
                config[f"zip_{suffix}"] = _file_info(stored_name, stored_data, hashes)
            else:
                config[f"zip_{suffix}"] = None
            config[f"raw_{suffix}"] = _file_info(basename, data, hashes)
            (remote / stored_name).parent.mkdir(parents=True, exist_ok=True)
            (remote / stored_name).write_bytes(stored_data)
        configs.append(config)
    write_index(remote, configs)
    return Dataset(remote=remote, entries=load_index(remote), contents=contents)


@pytest.fixture
def make_dataset(tmp_path: Path) -> Callable[..., Dataset]:
    """``make_dataset(**options)``: a fresh dataset under ``tmp_path/remote-<n>`` (see ``build_dataset``)."""
    counter = iter(range(1000))

    def make(**options: object) -> Dataset:
        return build_dataset(tmp_path / f"remote-{next(counter)}", **options)  # type: ignore[arg-type]

    return make


@pytest.fixture
def local(tmp_path: Path) -> Path:
    """An empty cache folder."""
    return tmp_path / "local"


class CountingStore(LocalStore):
    """A LocalStore that counts downloads per key (thread-safe)."""

    def __init__(self, url: str | os.PathLike[str]) -> None:
        super().__init__(url)
        self.downloads: dict[str, int] = {}
        self._mutex = threading.Lock()

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        with self._mutex:
            self.downloads[key] = self.downloads.get(key, 0) + 1
        return super().download(key, dest, timeout=timeout)


class CorruptingStore(CountingStore):
    """Flips one byte of the first ``bad_downloads`` downloads of shard files (size unchanged)."""

    def __init__(self, url: str | os.PathLike[str], bad_downloads: int) -> None:
        super().__init__(url)
        self.bad_downloads = bad_downloads

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        written = super().download(key, dest, timeout=timeout)
        if (
            key != "index.json"
            and sum(self.downloads.values()) - self.downloads.get("index.json", 0) <= self.bad_downloads
        ):
            data = bytearray(Path(dest).read_bytes())
            data[len(data) // 2] ^= 0xFF
            Path(dest).write_bytes(bytes(data))
        return written


class SlowStore(CountingStore):
    """Each download takes at least ``delay`` seconds, like a remote with real latency."""

    def __init__(self, url: str | os.PathLike[str], delay: float) -> None:
        super().__init__(url)
        self.delay = delay

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        time.sleep(self.delay)
        return super().download(key, dest, timeout=timeout)


@pytest.fixture
def counting_store() -> Callable[[Path], CountingStore]:
    """``counting_store(remote)``: a store that counts downloads per key."""
    return CountingStore


@pytest.fixture
def corrupting_store() -> Callable[[Path, int], CorruptingStore]:
    """``corrupting_store(remote, bad_downloads)``: the first downloads arrive with one byte flipped."""
    return CorruptingStore


@pytest.fixture
def slow_store() -> Callable[[Path, float], SlowStore]:
    """``slow_store(remote, delay)``: every download takes ``delay`` seconds more."""
    return SlowStore


@pytest.fixture
def upload_remote(remote: Remote) -> Callable[[Dataset], str]:
    """``upload_remote(dataset)``: copy a dataset's remote folder to ``remote`` (each store in turn)."""

    def upload(dataset: Dataset) -> str:
        remote.upload_folder(dataset.remote, dataset.remote.name)
        return remote.url(dataset.remote.name)

    return upload
