"""stream_plugin: deterministic, elastic, resumable streaming of training data from object storage."""

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

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
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
