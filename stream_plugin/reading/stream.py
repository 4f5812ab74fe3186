"""``Stream``: one data source (a remote folder of shards and its local cache), with its mixing weight."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from stream_plugin.errors import ConfigError
from stream_plugin.order.mixing import StreamWeight
from stream_plugin.redaction import redact_url
from stream_plugin.storage.download_settings import (
    DEFAULT_THROTTLE_DEADLINE,
    DOWNLOAD_DEFAULTS,
    DownloadSettings,
)
from stream_plugin.storage.registry import check_storage_options

_DOWNLOAD_NAMES = tuple(item.name for item in fields(DownloadSettings))


def _join(base: str | None, split: str) -> str | None:
    if base is None or not split:
        return base
    return f"{base.rstrip('/')}/{split}" if "://" in base else os.path.join(base, split)


def default_local(remote: str | None, split: str) -> str:
    """MosaicML's cache folder for a stream with no ``local``: ``<tmp>/<blake2s(remote)>/<split>``.

    The shards then live in ``<that>/<split>`` (MosaicML joins the split once more), so both libraries
    use the same folder. Unlike MosaicML, an existing folder is reused (the cache is crash safe).
    """
    digest = hashlib.blake2s(remote.encode("utf-8"), digest_size=16).hexdigest() if remote else ""
    return os.path.join(tempfile.gettempdir(), digest, split)


def _checked_columns(columns: Sequence[str] | None) -> tuple[str, ...] | None:
    if columns is None:
        return None
    if isinstance(columns, str) or not columns or not all(isinstance(name, str) for name in columns):
        raise ConfigError(
            f"Stream: expected columns to be a non-empty list of Parquet column names or None, found {columns!r}; "
            "pass e.g. columns=['text', 'label'], or None for every column"
        )
    return tuple(columns)


class Stream:
    """A data source, with the same arguments and meaning as MosaicML Streaming 0.13's ``Stream``.

    ``remote`` is where the shards live (``s3://...``, ``file://...``, a path, or None for a local-only
    stream); ``local`` is this node's cache folder for them. ``proportion``, ``repeat`` and ``choose``
    weight the stream in a mix (use one scheme for all streams). ``storage_options`` go to the remote's
    store (``open_store(remote, **storage_options)``): an endpoint, credentials, a requester-pays
    project, so that two streams can live in two accounts or clouds. ``throttle_deadline`` (seconds,
    default 15 minutes) bounds how long one download may be refused by a throttling store (429,
    ``SlowDown``) before it fails; throttling never uses up ``download_retry``. ``columns`` (a Parquet
    stream's, see ``docs/parquet.md``) reads only those columns and downloads only their bytes.
    """

    def __init__(
        self,
        *,
        remote: str | None = None,
        local: str | None = None,
        split: str | None = None,
        proportion: float | None = None,
        repeat: float | None = None,
        choose: int | None = None,
        download_retry: int | None = None,
        download_timeout: float | None = None,
        validate_hash: str | None = None,
        keep_zip: bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        throttle_deadline: float | None = None,
        columns: Sequence[str] | None = None,
    ) -> None:
        if remote is None and local is None:
            raise ConfigError(
                "Stream: expected remote, local or both, found neither; pass local='/path/to/dataset' for "
                "data on disk, or remote='s3://bucket/path' to stream it"
            )
        if isinstance(remote, os.PathLike) or isinstance(local, os.PathLike):
            remote = os.fspath(remote) if remote is not None else None
            local = os.fspath(local) if local is not None else None
        # remote, local and split are kept as given (as in MosaicML); the data is in their join.
        self.remote = remote
        self.split: str = split or ""
        self.local: str = local if local is not None else default_local(remote, self.split)
        self.weight = StreamWeight(proportion=proportion, repeat=repeat, choose=choose)
        self._resolved: tuple[float, float, int] | None = None  # (proportion, repeat, choose) once built
        self._download_retry = download_retry
        self._download_timeout = download_timeout
        self._validate_hash = validate_hash
        self._keep_zip = keep_zip
        self.storage_options = check_storage_options(storage_options)
        if throttle_deadline is not None and not throttle_deadline > 0:
            raise ConfigError(
                f"Stream: expected throttle_deadline > 0 seconds (how long one download may wait out a throttling "
                f"store), found {throttle_deadline!r}; pass None for the default, {DEFAULT_THROTTLE_DEADLINE:g}s"
            )
        self._throttle_deadline = throttle_deadline
        self._columns = _checked_columns(columns)

    @property
    def local_dir(self) -> str:
        """The folder that holds (or caches) this stream's ``index.json`` and shards: ``local/split``."""
        joined = _join(self.local, self.split)
        assert joined is not None
        return joined

    @property
    def remote_dir(self) -> str | None:
        """Where the shards are fetched from (``remote/split``); None for a local-only stream.

        ``remote`` naming the same folder as ``local`` means local-only data, as in MosaicML (never
        evicted).
        """
        joined = _join(self.remote, self.split)
        if joined is None or os.path.abspath(joined) == os.path.abspath(self.local_dir):
            return None
        return joined

    def apply_default(self, default: dict[str, Any]) -> None:
        """Take the dataset's ``split`` and download settings where this stream left them unset.

        The dataset calls this once, as MosaicML's does; a registered subclass may extend it.
        """
        if not self.split:
            self.split = default.get("split") or ""
        for name in (*_DOWNLOAD_NAMES, "throttle_deadline"):
            if getattr(self, f"_{name}") is None:
                setattr(self, f"_{name}", default.get(name))
        if self._columns is None:
            self._columns = _checked_columns(default.get("columns"))

    @property
    def download_retry(self) -> int | None:
        """The given ``download_retry`` (None: the dataset's default), as MosaicML's attribute."""
        return self._download_retry

    @property
    def download_timeout(self) -> float | None:
        """The given ``download_timeout`` (None: the dataset's default)."""
        return self._download_timeout

    @property
    def validate_hash(self) -> str | None:
        """The given ``validate_hash`` (None: the dataset's default)."""
        return self._validate_hash

    @property
    def keep_zip(self) -> bool | None:
        """The given ``keep_zip`` (None: the dataset's default)."""
        return self._keep_zip

    @property
    def columns(self) -> tuple[str, ...] | None:
        """The Parquet columns this stream reads (None: all); only those columns' bytes are downloaded."""
        return self._columns

    @property
    def throttle_deadline(self) -> float:
        """Seconds one download may be throttled before it fails: this stream's, else the dataset's
        default (``apply_default``), else ``DEFAULT_THROTTLE_DEADLINE``."""
        deadline = self._throttle_deadline
        return DEFAULT_THROTTLE_DEADLINE if deadline is None else float(deadline)

    def resolve_weights(self, *, proportion: float, repeat: float, choose: int) -> None:
        """Record the weights the dataset derived for this stream (read back through the properties)."""
        self._resolved = (float(proportion), float(repeat), int(choose))

    @property
    def proportion(self) -> float | None:
        """The given proportion; once a dataset is built, this stream's share of the epoch."""
        return self._resolved[0] if self._resolved is not None else self.weight.proportion

    @property
    def repeat(self) -> float | None:
        """The given repeat; once a dataset is built, epoch samples per underlying sample."""
        return self._resolved[1] if self._resolved is not None else self.weight.repeat

    @property
    def choose(self) -> int | None:
        """The given choose; once a dataset is built, the samples this stream gives each epoch."""
        return self._resolved[2] if self._resolved is not None else self.weight.choose

    def download_settings(self, defaults: DownloadSettings) -> DownloadSettings:
        """This stream's settings: its own where given, else the dataset's ``defaults``."""
        own = {name: getattr(self, f"_{name}") for name in _DOWNLOAD_NAMES}
        return DownloadSettings(
            **{name: getattr(defaults, name) if value is None else value for name, value in own.items()}
        )

    def __repr__(self) -> str:
        remote = None if self.remote is None else redact_url(self.remote)
        return f"{type(self).__name__}(remote={remote!r}, local={self.local!r}, split={self.split!r}, weight={self.weight})"


__all__ = ["DOWNLOAD_DEFAULTS", "DownloadSettings", "Stream", "default_local"]
