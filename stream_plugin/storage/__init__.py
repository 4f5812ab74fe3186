"""Object storage: one small protocol (``ObjectStore``), backends for local/S3/HTTP/GCS/Azure/Hub/fsspec,
plugins, retries.

``open_store(url)`` picks the backend from the URL scheme; ``call_with_retries`` retries the transient
failures every backend reports as ``TransientStorageError`` (waiting out ``ThrottledError``, the store's
rate limit, without counting an attempt) and fails fast on 404 / 403. The backends
that need a cloud SDK (boto3, google-cloud-storage, azure-storage-blob, huggingface_hub, fsspec) are imported on first
use, here as in ``open_store``, so importing this package loads none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stream_plugin.lazy_names import imported_on_use
from stream_plugin.storage.base import (
    ObjectInfo,
    ObjectStore,
    RangedStore,
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    RetriesExhaustedError,
    ThrottledError,
    ThrottledTooLongError,
    TransientStorageError,
    join_key,
    ranged,
)
from stream_plugin.storage.http import HttpStore
from stream_plugin.storage.local import LocalStore
from stream_plugin.storage.registry import (
    ENTRY_POINT_GROUP,
    is_remote,
    known_schemes,
    open_store,
    split_out,
)
from stream_plugin.storage.retry import RetryPolicy, call_with_retries

if TYPE_CHECKING:
    from stream_plugin.storage.azure import AzureStore
    from stream_plugin.storage.fsspec_store import FsspecStore
    from stream_plugin.storage.gcs import GcsStore
    from stream_plugin.storage.hub import HubStore
    from stream_plugin.storage.s3 import S3Store

_IMPORTED_ON_USE = {
    "S3Store": "stream_plugin.storage.s3",
    "GcsStore": "stream_plugin.storage.gcs",
    "AzureStore": "stream_plugin.storage.azure",
    "FsspecStore": "stream_plugin.storage.fsspec_store",
    "HubStore": "stream_plugin.storage.hub",
}


__getattr__ = imported_on_use(__name__, _IMPORTED_ON_USE)


__all__ = [
    "ObjectInfo",
    "RangedStore",
    "ranged",
    "ENTRY_POINT_GROUP",
    "AzureStore",
    "FsspecStore",
    "GcsStore",
    "HttpStore",
    "HubStore",
    "LocalStore",
    "ObjectStore",
    "RemoteAccessDeniedError",
    "RemoteNotFoundError",
    "RetriesExhaustedError",
    "RetryPolicy",
    "S3Store",
    "ThrottledError",
    "ThrottledTooLongError",
    "TransientStorageError",
    "call_with_retries",
    "is_remote",
    "join_key",
    "known_schemes",
    "open_store",
    "split_out",
]
