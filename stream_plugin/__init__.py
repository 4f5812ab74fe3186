"""stream_plugin: deterministic, elastic, resumable streaming of training data from object storage.

The reading side needs torch; writers, the index tools and the CLI do not, so ``StreamingDataset`` and
``StreamingDataLoader`` are imported on first use and ``import stream_plugin`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stream_plugin.errors import (
    ConfigError,
    EncodingError,
    FormatError,
    IndexFormatError,
    MissingDependencyError,
    RemoteChangedError,
    ShardIntegrityError,
    StateError,
    StorageError,
    StreamPluginError,
    UnknownEncodingError,
    UnsafePathError,
    UnsafeTypeError,
)
from stream_plugin.format.encodings import register_encoding
from stream_plugin.format.merge import merge_index
from stream_plugin.format.writer import CSVWriter, JSONWriter, MDSWriter, TSVWriter, XSVWriter
from stream_plugin.stream import Stream
from stream_plugin.world import World

if TYPE_CHECKING:
    from stream_plugin.dataset import StreamingDataset
    from stream_plugin.loader import StreamingDataLoader

_IMPORTED_ON_USE = {
    "StreamingDataset": "stream_plugin.dataset",
    "StreamingDataLoader": "stream_plugin.loader",
}


def __getattr__(name: str) -> Any:
    module = _IMPORTED_ON_USE.get(name)
    if module is None:
        raise AttributeError(f"module 'stream_plugin' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__version__ = "0.1.0"

__all__ = [
    "CSVWriter",
    "ConfigError",
    "JSONWriter",
    "MDSWriter",
    "Stream",
    "StreamingDataLoader",
    "StreamingDataset",
    "TSVWriter",
    "World",
    "XSVWriter",
    "merge_index",
    "register_encoding",
    "EncodingError",
    "FormatError",
    "IndexFormatError",
    "MissingDependencyError",
    "RemoteChangedError",
    "ShardIntegrityError",
    "StateError",
    "StorageError",
    "StreamPluginError",
    "UnknownEncodingError",
    "UnsafePathError",
    "UnsafeTypeError",
    "__version__",
]
