"""stream_plugin: deterministic, elastic, resumable streaming of training data from object storage."""

from stream_plugin.dataset import StreamingDataset
from stream_plugin.errors import (
    ConfigError,
    EncodingError,
    FormatError,
    IndexFormatError,
    MissingDependencyError,
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
from stream_plugin.loader import StreamingDataLoader
from stream_plugin.stream import Stream

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
    "XSVWriter",
    "merge_index",
    "register_encoding",
    "EncodingError",
    "FormatError",
    "IndexFormatError",
    "MissingDependencyError",
    "ShardIntegrityError",
    "StateError",
    "StorageError",
    "StreamPluginError",
    "UnknownEncodingError",
    "UnsafePathError",
    "UnsafeTypeError",
    "__version__",
]
