"""Object storage: one small protocol (``ObjectStore``), backends for local/S3/HTTP, plugins, retries.

``open_store(url)`` picks the backend from the URL scheme; ``call_with_retries`` retries the transient
failures every backend reports as ``TransientStorageError`` and fails fast on 404 / 403.
"""

from stream_plugin.storage.base import (
    ObjectStore,
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    RetriesExhaustedError,
    TransientStorageError,
    join_key,
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
from stream_plugin.storage.s3 import S3Store

__all__ = [
    "ENTRY_POINT_GROUP",
    "HttpStore",
    "LocalStore",
    "ObjectStore",
    "RemoteAccessDeniedError",
    "RemoteNotFoundError",
    "RetriesExhaustedError",
    "RetryPolicy",
    "S3Store",
    "TransientStorageError",
    "call_with_retries",
    "is_remote",
    "join_key",
    "known_schemes",
    "open_store",
    "split_out",
]
