"""stream_plugin: deterministic, elastic, resumable streaming of training data from object storage.

The reading side needs torch; writers, the index tools and the CLI do not, so ``StreamingDataset`` and
``StreamingDataLoader`` are imported on first use and ``import stream_plugin`` stays light.

Logging goes to ``logging.getLogger("stream_plugin")`` and its children: retries (with their cause),
slow downloads and a remote that changed at WARNING, evictions and the rest at DEBUG. Nothing is
printed until the application configures logging (``logging.basicConfig(level=logging.INFO)``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from stream_plugin._version import __version__
from stream_plugin.errors import (
    ConfigError,
    ConfigTypeError,
    EmptyStreamError,
    EncodingError,
    EncodingTypeError,
    FormatError,
    IndexFormatError,
    IndexJSONError,
    LayoutError,
    MissingDependencyError,
    MissingIndexError,
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
from stream_plugin.lazy_names import imported_on_use
from stream_plugin.order.data_parallel import DATA_PARALLEL_DIM_NAMES, DataParallelLayout, data_parallel_dims
from stream_plugin.reading.cursor import IterationPlan
from stream_plugin.reading.data_parallel import data_parallel_submesh, mesh_coordinates
from stream_plugin.reading.passes import LoaderPass
from stream_plugin.reading.state import ResumeState, resume_state_at
from stream_plugin.reading.stream import Stream
from stream_plugin.reading.stream_registry import streams_registry
from stream_plugin.reading.world import World, detect_world

if TYPE_CHECKING:
    from stream_plugin.parquet.indexer import index_parquet
    from stream_plugin.reading.dataset import StreamingDataset
    from stream_plugin.reading.eval_loader import EvalLoader
    from stream_plugin.reading.loader import LoaderPosition, StreamingDataLoader
    from stream_plugin.reading.local_dataset import LocalDataset

_IMPORTED_ON_USE = {
    "LocalDataset": "stream_plugin.reading.local_dataset",
    "StreamingDataset": "stream_plugin.reading.dataset",
    "StreamingDataLoader": "stream_plugin.reading.loader",
    "EvalLoader": "stream_plugin.reading.eval_loader",
    "LoaderPosition": "stream_plugin.reading.loader",
    "index_parquet": "stream_plugin.parquet.indexer",
}


__getattr__ = imported_on_use(__name__, _IMPORTED_ON_USE)


# Library logging: everything goes to the "stream_plugin" logger tree (stream_plugin.storage,
# stream_plugin.cache, ...) and is silent until the application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "CSVWriter",
    "ConfigError",
    "ConfigTypeError",
    "DATA_PARALLEL_DIM_NAMES",
    "DataParallelLayout",
    "data_parallel_dims",
    "EmptyStreamError",
    "JSONWriter",
    "LocalDataset",
    "MDSWriter",
    "Stream",
    "StreamingDataLoader",
    "StreamingDataset",
    "EvalLoader",
    "TSVWriter",
    "World",
    "XSVWriter",
    "IterationPlan",
    "LoaderPass",
    "LoaderPosition",
    "ResumeState",
    "resume_state_at",
    "detect_world",
    "mesh_coordinates",
    "data_parallel_submesh",
    "merge_index",
    "index_parquet",
    "streams_registry",
    "register_encoding",
    "EncodingError",
    "EncodingTypeError",
    "FormatError",
    "IndexFormatError",
    "IndexJSONError",
    "LayoutError",
    "MissingDependencyError",
    "MissingIndexError",
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
