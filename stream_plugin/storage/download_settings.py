"""How a stream's shards are fetched and checked (MosaicML's download arguments), and their defaults.

The one place ``download_retry``, ``download_timeout``, ``validate_hash``, ``keep_zip`` and
``throttle_deadline`` take their defaults: the dataset and ``Stream`` (``reading.stream``), the cache (``cache.shard_cache.CacheConfig``),
the retry policy (``storage.retry``) and ``merge_index`` read them from ``DOWNLOAD_DEFAULTS``. It lives
in ``storage``, the lowest of those layers, so that none of them imports upwards for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class DownloadSettings:
    """How one stream's shards are fetched and checked; unset fields take the dataset's values."""

    download_retry: int = 2  # retries after the first try
    download_timeout: float = 60.0  # seconds per attempt
    validate_hash: str | None = None  # a hash the index records, checked on every downloaded file
    keep_zip: bool = False  # keep a compressed shard's compressed file beside the decompressed one


# The download defaults, for signatures that restate them (``StreamingDataset``'s, ``CacheConfig``'s, the
# Lightning ``DatasetSpec``): read from the fields above, so each is written once.
DOWNLOAD_DEFAULTS: Final = DownloadSettings()

# How long one download may be refused by a throttling store (429, SlowDown) before it fails, in seconds;
# ``Stream(throttle_deadline=...)`` and ``CacheConfig.throttle_deadline``. Throttling waits are not
# failed attempts: ``download_retry`` counts real failures only. (Not a ``DownloadSettings`` field yet:
# ``StreamingDataset`` restates every field as an argument, and it has no ``throttle_deadline`` one.)
DEFAULT_THROTTLE_DEADLINE: Final = 15 * 60.0


__all__ = ["DEFAULT_THROTTLE_DEADLINE", "DOWNLOAD_DEFAULTS", "DownloadSettings"]
