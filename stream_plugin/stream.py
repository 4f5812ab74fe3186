"""``Stream``: one data source (a remote folder of shards and its local cache), with its mixing weight."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stream_plugin.errors import ConfigError
from stream_plugin.order.mixing import StreamWeight
from stream_plugin.storage.registry import check_storage_options


def _join(base: str | None, split: str | None) -> str | None:
    if base is None or not split:
        return base
    return f"{base.rstrip('/')}/{split}" if "://" in base else os.path.join(base, split)


def default_local(remote: str, split: str | None) -> str:
    """A per-remote cache folder under the system temp dir, stable across runs (MosaicML's default)."""
    digest = hashlib.blake2s(f"{remote}|{split or ''}".encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), "stream_plugin", digest)


@dataclass(frozen=True)
class DownloadSettings:
    """How one stream's shards are fetched and checked; unset fields take the dataset's values."""

    download_retry: int = 2
    download_timeout: float = 60.0
    validate_hash: str | None = None
    keep_zip: bool = False


class Stream:
    """A data source, with the same arguments and meaning as MosaicML Streaming 0.13's ``Stream``.

    ``remote`` is where the shards live (``s3://...``, ``file://...``, a path, or None for a local-only
    stream); ``local`` is this node's cache folder for them. ``proportion``, ``repeat`` and ``choose``
    weight the stream in a mix (use one scheme for all streams). ``storage_options`` go to the remote's
    store (``open_store(remote, **storage_options)``): an endpoint, credentials, a requester-pays
    project, so that two streams can live in two accounts or clouds.
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
    ) -> None:
        if remote is None and local is None:
            raise ConfigError(
                "Stream: expected remote, local or both, found neither; pass local='/path/to/dataset' for "
                "data on disk, or remote='s3://bucket/path' to stream it"
            )
        if isinstance(remote, os.PathLike) or isinstance(local, os.PathLike):
            remote = os.fspath(remote) if remote is not None else None
            local = os.fspath(local) if local is not None else None
        self.split = split
        self.remote = _join(remote, split)
        joined_local = _join(local, split)
        self.local: str = joined_local if joined_local is not None else default_local(str(remote), split)
        if self.remote is not None and os.path.abspath(self.remote) == os.path.abspath(self.local):
            # MosaicML treats remote == local as local-only data; so do we (it is then never evicted).
            self.remote = None
        self.weight = StreamWeight(proportion=proportion, repeat=repeat, choose=choose)
        self._download_retry = download_retry
        self._download_timeout = download_timeout
        self._validate_hash = validate_hash
        self._keep_zip = keep_zip
        self.storage_options = check_storage_options(storage_options)

    @property
    def proportion(self) -> float | None:
        return self.weight.proportion

    @property
    def repeat(self) -> float | None:
        return self.weight.repeat

    @property
    def choose(self) -> int | None:
        return self.weight.choose

    def download_settings(self, defaults: DownloadSettings) -> DownloadSettings:
        """This stream's settings: its own where given, else the dataset's ``defaults``."""
        return DownloadSettings(
            download_retry=defaults.download_retry if self._download_retry is None else self._download_retry,
            download_timeout=defaults.download_timeout
            if self._download_timeout is None
            else self._download_timeout,
            validate_hash=defaults.validate_hash if self._validate_hash is None else self._validate_hash,
            keep_zip=defaults.keep_zip if self._keep_zip is None else self._keep_zip,
        )

    def __repr__(self) -> str:
        return f"Stream(remote={self.remote!r}, local={self.local!r}, weight={self.weight})"
