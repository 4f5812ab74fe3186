"""Converters that write whole datasets to MDS: Spark DataFrames, Hugging Face datasets, local files in
parallel.

``from stream_plugin.converters import dataframe_to_mds`` replaces MosaicML's
``from streaming.base.converters import dataframe_to_mds``. Each converter is imported on first use, so
this package needs PySpark only for the Spark one and ``datasets`` only for the Hugging Face one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stream_plugin.converters.hf import hf_dataset_to_mds
    from stream_plugin.converters.parallel import files_to_mds, map_to_mds
    from stream_plugin.converters.spark import dataframe_to_mds, dataframeToMDS
    from stream_plugin.converters.spark_types import is_json_compatible

_IMPORTED_ON_USE = {
    "dataframe_to_mds": ("stream_plugin.converters.spark", "dataframe_to_mds"),
    "dataframeToMDS": ("stream_plugin.converters.spark", "dataframeToMDS"),
    "is_json_compatible": ("stream_plugin.converters.spark_types", "is_json_compatible"),
    "hf_dataset_to_mds": ("stream_plugin.converters.hf", "hf_dataset_to_mds"),
    "map_to_mds": ("stream_plugin.converters.parallel", "map_to_mds"),
    "files_to_mds": ("stream_plugin.converters.parallel", "files_to_mds"),
}


def __getattr__(name: str) -> Any:
    found = _IMPORTED_ON_USE.get(name)
    if found is None:
        raise AttributeError(f"module 'stream_plugin.converters' has no attribute {name!r}")
    module, attribute = found
    return getattr(importlib.import_module(module), attribute)


__all__ = [
    "dataframeToMDS",
    "dataframe_to_mds",
    "files_to_mds",
    "hf_dataset_to_mds",
    "is_json_compatible",
    "map_to_mds",
]
