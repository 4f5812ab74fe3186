"""What every shard writer shares: arguments, shard rolling, output folders, storing and uploading shards.

Safety rules, stricter than MosaicML Streaming's:

* every file (shard, meta, index) appears by atomic rename, complete or not at all;
* ``index.json`` is written last, only after every shard is stored (and uploaded, for a remote ``out``);
* an exception inside the ``with`` block writes no index at all (MosaicML writes one): a dataset that
  was cut short never looks complete. Shards already stored stay, without an index pointing at them;
* an upload failure raises ``StorageError`` from ``write()`` / ``finish()``, never a partial dataset.
"""

from __future__ import annotations

import copy
import errno
import inspect
import json
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

from stream_plugin.errors import ConfigError, ConfigTypeError, StorageError
from stream_plugin.fileio import atomic_write_bytes
from stream_plugin.format.compression import CompressionSpec, compress, parse_compression
from stream_plugin.format.hashing import check_hash_names, hash_data
from stream_plugin.format.index import INDEX_BASENAME, index_document, write_index
from stream_plugin.format.shard_file import config_bytes
from stream_plugin.progress import ProgressBar
from stream_plugin.redaction import get_logger
from stream_plugin.storage import ObjectStore, RetryPolicy, call_with_retries, open_store, split_out
from stream_plugin.storage.local import local_root
from stream_plugin.storage.registry import check_storage_options
from stream_plugin.units import parse_bytes

logger = get_logger(__name__)

SIZE_LIMIT_MAX = (1 << 32) - 1  # sample offsets are uint32


class OutputExistsError(StorageError, FileExistsError):
    """The writer's output (local folder or remote) already holds files and ``exist_ok`` is False."""


def check_size_limit(size_limit: int | str | None) -> int | None:
    """``size_limit`` in bytes, or None for no limit (None or 0, as in MosaicML)."""
    if size_limit is None or (not isinstance(size_limit, bool) and size_limit == 0):
        return None
    limit = parse_bytes(size_limit, name="size_limit")
    if limit > SIZE_LIMIT_MAX:
        raise ConfigError(
            f"size_limit: expected at most {SIZE_LIMIT_MAX} bytes (2**32 - 1; shard offsets are uint32), "
            f"found {limit} (`size_limit` must be less than 2**32); pass a smaller size such as '64mb' (the "
            "default is 1 << 26)"
        )
    return limit or None


def prepare_local_folder(folder: Path, *, exist_ok: bool) -> None:
    """Create ``folder``; with ``exist_ok`` empty it first, index.json before anything else."""
    if folder.exists() and not folder.is_dir():
        raise OutputExistsError(
            f"{folder}: expected a folder to write the dataset into, found a file; choose another path"
        )
    if folder.is_dir() and any(folder.iterdir()):
        if not exist_ok:
            raise OutputExistsError(
                f"{folder}: expected an empty or new output folder, found it holds files (Directory is not "
                "empty); pass "
                "exist_ok=True to replace its contents, or choose another folder"
            )
        # The old index goes first: from then on no reader sees the old dataset mixed with new shards.
        (folder / INDEX_BASENAME).unlink(missing_ok=True)
        for child in folder.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    folder.mkdir(parents=True, exist_ok=True)


def remote_holds_files(store: ObjectStore) -> bool:
    """Whether the remote ``out`` already holds an index.json or any other object (a store that cannot
    list: whether index.json exists). The index is asked for first: one request for the common case."""
    if store.exists(INDEX_BASENAME):
        return True
    try:
        return bool(store.list())
    except StorageError:
        return False


def check_remote_out(store: ObjectStore, *, exist_ok: bool) -> bool:
    """Refuse a remote ``out`` that holds files unless ``exist_ok``; return whether it holds files."""
    holds_files = remote_holds_files(store)
    if holds_files and not exist_ok:
        raise OutputExistsError(
            f"{store.url}: expected an empty or new remote output, found it holds files; pass exist_ok=True "
            "to overwrite the dataset there (its index.json is deleted before the first new shard is "
            "uploaded), or choose another remote"
        )
    return holds_files


def take_down_remote_index(store: ObjectStore) -> None:
    """Delete the remote index.json before any new shard is uploaded.

    From then on no reader sees the old index pointing at shards of this write. Old shards are
    overwritten, or stay unreferenced.
    """
    delete = getattr(store, "delete", None)
    if delete is None:
        if store.exists(INDEX_BASENAME):
            raise StorageError(
                f"{store.url}: expected a store that can delete its old index.json before an overwrite, found "
                f"{type(store).__name__} has no delete method; delete {INDEX_BASENAME} there yourself, or "
                "write to an empty remote"
            )
        return
    delete(INDEX_BASENAME)


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


@contextmanager
def room_for(folder: Path, name: str, size: int) -> Iterator[None]:
    """Turn a full disk (ENOSPC, or a quota) while writing ``name`` into a ``StorageError`` naming the
    folder and the bytes needed; the partial file is gone already (``atomic_write_bytes``)."""
    try:
        yield
    except OSError as error:
        if error.errno not in _DISK_FULL:
            raise
        raise StorageError(
            f"{folder}: expected room for {size} more bytes ({name}), found the disk full ({error.strerror}); "
            "free space or write to another folder. No index.json was written, so the partial dataset is "
            "not visible to readers"
        ) from error


class ShardStore:
    """Turns a closed shard's raw files into stored files: digests, compression, local file, upload."""

    def __init__(
        self,
        local: Path,
        remote: ObjectStore | None,
        *,
        compression: CompressionSpec | None,
        hashes: list[str],
        keep_local: bool,
        retry: int,
    ) -> None:
        self.local = local
        self.remote = remote
        self.compression = compression
        self.hashes = hashes
        self.keep_local = keep_local
        # MosaicML's ``retry`` counts attempts (its default 2 means one retry); 0 still tries once.
        self._retry = RetryPolicy(attempts=max(1, retry), timeout=None)

    def describe(self, basename: str, data: bytes) -> dict[str, Any]:
        """The ``raw_data``/``zip_data`` object of the index for one file."""
        digests = {name: hash_data(name, data) for name in self.hashes}
        return {"basename": basename, "bytes": len(data), "hashes": digests}

    def store(self, basename: str, raw: bytes) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Store one raw file (compressed when asked); returns its (raw, zip) descriptions."""
        raw_info = self.describe(basename, raw)
        zip_info = None
        if self.compression is not None:
            data = compress(self.compression, raw)
            zip_info = self.describe(f"{basename}.{self.compression.extension}", data)
        else:
            data = raw
        stored_name = (zip_info or raw_info)["basename"]
        with room_for(self.local, stored_name, len(data)):
            atomic_write_bytes(self.local / stored_name, data)
        self.upload(stored_name)
        return raw_info, zip_info

    def upload(self, basename: str, *, keep: bool | None = None) -> None:
        """Upload a local file when the output is remote; drop the local copy unless kept."""
        if self.remote is None:
            return
        path = self.local / basename
        remote = self.remote
        try:
            call_with_retries(
                lambda: remote.upload(path, basename), self._retry, describe=f"upload of {basename}"
            )
        except Exception as error:
            raise StorageError(
                f"writer: expected to upload {basename} to {remote.url}, found {type(error).__name__}: "
                f"{error}. index.json was not uploaded, so readers do not see the incomplete dataset; "
                "fix the remote (credentials, permissions, space) and write the dataset again"
            ) from error
        if not (self.keep_local if keep is None else keep):
            path.unlink(missing_ok=True)


class ShardWriter:
    """Base class of the writers: subclasses encode samples and lay out the files of one shard.

    Options, as in MosaicML: ``out`` a local folder, a remote URL (written through a temporary local
    folder) or ``(local, remote)``; ``compression`` such as ``'zstd'`` or ``'zstd:7'``; ``hashes`` digest
    names stored in the index; ``size_limit`` bytes per shard (int or ``'64mb'``; None or 0: no limit);
    ``keep_local`` keep local files after upload; ``progress_bar`` a progress line on stderr;
    ``max_workers`` threads that compress, hash and upload closed shards; ``exist_ok`` replace the
    contents of a non-empty local folder, or overwrite a remote that holds files (its index.json is
    deleted first, so readers never see the old index pointing at new shards); ``retry`` upload attempts
    for transient errors; ``storage_options`` options of the remote's store
    (``open_store(remote, **storage_options)``: an endpoint, credentials).
    """

    format: ClassVar[str] = ""
    # Bytes a sample adds to a shard beyond its own encoding (MDS: its uint32 offset).
    extra_bytes_per_sample: ClassVar[int] = 0

    def __init__(
        self,
        *,
        out: str | tuple[str, str],
        compression: str | None = None,
        hashes: list[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        keep_local: bool = False,
        progress_bar: bool = False,
        max_workers: int | None = None,
        exist_ok: bool = False,
        retry: int = 2,
        storage_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            options = [name for name in inspect.signature(ShardWriter.__init__).parameters if name != "self"]
            raise ConfigTypeError(
                f"{type(self).__name__}: expected its own arguments and the writer options {options[:-1]}, found "
                f"unknown {sorted(kwargs)} (Invalid Writer argument(s)); remove or rename them"
            )
        spec = parse_compression(compression or None)
        self.compression = spec.name if spec is not None else None
        self.hashes = check_hash_names(list(hashes or []))
        self.size_limit = check_size_limit(size_limit)
        if not isinstance(retry, int) or retry < 0:
            raise ConfigError(f"retry: expected an int >= 0 (upload attempts), found {retry!r}")
        self.keep_local = keep_local
        self.progress_bar = progress_bar
        self._progress = ProgressBar(None, label=f"{self.format} writer", unit="samples", enabled=progress_bar)
        local, remote = split_out(out)
        self._temporary_local = local is None
        self.local = (
            tempfile.mkdtemp(prefix="stream_plugin-writer-") if local is None else str(local_root(local))
        )
        self.remote = remote
        remote_store = open_store(remote, **check_storage_options(storage_options)) if remote is not None else None
        overwrite = False
        try:
            if remote_store is not None:
                overwrite = check_remote_out(remote_store, exist_ok=exist_ok)
            prepare_local_folder(Path(self.local), exist_ok=exist_ok)
        except BaseException:
            if self._temporary_local:
                shutil.rmtree(self.local, ignore_errors=True)
            raise
        if remote_store is not None and overwrite:
            take_down_remote_index(remote_store)
        self._store = ShardStore(
            Path(self.local),
            remote_store,
            compression=spec,
            hashes=self.hashes,
            keep_local=keep_local,
            retry=retry,
        )
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="shard-writer")
        self._max_pending = max(2, max_workers or 4)
        self._pending: deque[Future[dict[str, Any]]] = deque()
        self._entries: list[dict[str, Any]] = []
        self._stored_bytes = 0
        self._failure: BaseException | None = None
        self._closed = False
        self._samples: list[bytes] = []
        self._total_samples = 0
        self._shard_size = 0

    # ---- hooks for subclasses ----

    def _init_format(self, config: Mapping[str, Any], encode: Callable[[Mapping[str, Any]], bytes]) -> None:
        """Called by subclasses once their columns are known: fixes the config and the sample encoder."""
        self._config = {**self.base_config(), **config}
        self._config_bytes = config_bytes(self._config)
        self._encode = encode
        self._shard_overhead = self.shard_overhead()
        self._shard_size = self._shard_overhead

    def base_config(self) -> dict[str, Any]:
        """The keys every shard entry has besides samples and file descriptions."""
        return {
            "version": 2,
            "format": self.format,
            "compression": self.compression,
            "hashes": list(self.hashes),
            "size_limit": self.size_limit,
        }

    def get_config(self) -> dict[str, Any]:
        """The shard-writing configuration, as MosaicML's ``Writer.get_config()`` returns it: the keys every
        shard entry of ``index.json`` repeats (version, format, compression, hashes, size_limit and the
        format's column keys). Public API: MosaicML users call it; a fresh copy each call."""
        return copy.deepcopy(self._config)

    def shard_overhead(self) -> int:
        """Bytes a shard counts against size_limit before any sample."""
        return 0

    def build_files(self, samples: list[bytes]) -> list[tuple[str, bytes]]:
        """The raw files of one shard as (key suffix, bytes): ``("data", ...)`` and maybe ``("meta", ...)``."""
        raise NotImplementedError

    # ---- the writing loop ----

    def write(self, sample: Mapping[str, Any]) -> None:
        """Add one sample; closes the current shard first if the sample would push it past size_limit."""
        if self._failure is not None or self._closed:
            self._raise_if_failed()
            raise ConfigError(
                f"{type(self).__name__}: expected an open writer, found it finished or aborted; create a new "
                "writer to write more samples"
            )
        data = self._encode(sample)
        size = len(data) + self.extra_bytes_per_sample
        limit = self.size_limit
        if limit is not None and self._samples and self._shard_size + size > limit:
            if len(self._samples) == 1 and not self._pending and not self._entries:
                logger.warning(
                    "size_limit=%d bytes holds a single sample of about %d bytes: every sample will be its "
                    "own shard (slow to write and read); raise size_limit, such as '64mb'",
                    limit,
                    self._shard_size - self._shard_overhead,
                )
            self._flush_shard()
        self._samples.append(data)
        self._shard_size += size

    def encode_sample(self, sample: Mapping[str, Any]) -> bytes:
        """One sample as this format stores it (MosaicML's public method); it is not written."""
        return self._encode(sample)

    def flush_shard(self) -> None:
        """Close the current shard now, so that the next sample starts a new one (MosaicML's public
        method). A shard that holds no sample is not written (MosaicML writes an empty one)."""
        self._raise_if_failed()
        if self._samples:
            self._flush_shard()

    def _flush_shard(self) -> None:
        samples, self._samples = self._samples, []
        self._progress.advance(len(samples), nbytes=self._shard_size)
        self._shard_size = self._shard_overhead
        shard_id = len(self._pending) + len(self._entries)
        self._total_samples += len(samples)
        future = self._executor.submit(self._store_shard, shard_id, samples)
        future.add_done_callback(self._note_failure)
        self._pending.append(future)
        while len(self._pending) > self._max_pending:
            self._collect_oldest()

    def _store_shard(self, shard_id: int, samples: list[bytes]) -> dict[str, Any]:
        entry: dict[str, Any] = {"samples": len(samples)}
        for kind, raw in self.build_files(samples):
            suffix = "" if kind == "data" else f".{kind}"
            raw_info, zip_info = self._store.store(f"shard.{shard_id:05}.{self.format}{suffix}", raw)
            entry[f"raw_{kind}"] = raw_info
            entry[f"zip_{kind}"] = zip_info
        entry.update(self._config)
        return entry

    def _note_failure(self, future: Future[dict[str, Any]]) -> None:
        if not future.cancelled() and future.exception() is not None and self._failure is None:
            self._failure = future.exception()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    @property
    def stored_bytes(self) -> int:
        """Bytes of the shard files stored so far (compressed sizes when compressing); for progress."""
        return self._stored_bytes

    def _collect_oldest(self) -> None:
        entry = self._pending.popleft().result()
        self._entries.append(entry)
        self._stored_bytes += sum(
            (entry.get(f"zip_{kind}") or entry[f"raw_{kind}"])["bytes"]
            for kind in ("data", "meta")
            if entry.get(f"raw_{kind}")
        )

    def finish(self) -> None:
        """Store the last shard, wait for every shard, then write (and upload) index.json."""
        if self._closed:
            return
        try:
            self._raise_if_failed()
            if self._samples:
                self._flush_shard()
            while self._pending:
                self._collect_oldest()
            with room_for(Path(self.local), INDEX_BASENAME, len(json.dumps(index_document(self._entries)))):
                write_index(self.local, self._entries)
            self._store.upload(INDEX_BASENAME)
        except BaseException:
            self._abort()
            raise
        self._closed = True
        self._executor.shutdown(wait=True)
        self._progress.close()
        if self.remote is not None and not self.keep_local and self._temporary_local:
            shutil.rmtree(self.local, ignore_errors=True)

    def _abort(self) -> None:
        """Stop without an index: cancel queued shards and wait for the running ones to end."""
        self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()
        self._samples = []
        if self._temporary_local:
            shutil.rmtree(self.local, ignore_errors=True)  # nobody else knows this folder

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.finish()
        else:
            self._abort()
