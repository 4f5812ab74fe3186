"""Hugging Face ``datasets`` Features to MDS column encodings, and the value conversions they need.

==========================================  ==========================================
Feature                                     MDS encoding
==========================================  ==========================================
Value int8..int64, uint8..uint64            the same name (``int32``, ``uint8``, ...)
Value float16/32/64                         ``float16`` / ``float32`` / ``float64``
Value string / large_string                 ``str``
Value binary / large_binary                 ``bytes``
Value bool                                  ``json`` (MDS has no boolean encoding)
ClassLabel                                  ``int64`` (the label's integer)
Sequence / List of a numeric Value          ``ndarray:<dtype>`` (any length)
Array2D/3D/4D/5D with a fixed shape         ``ndarray:<dtype>:<d0>,<d1>,...``
Image                                       ``png`` (lossless; pass ``jpeg`` to re-encode)
nested dicts, lists of strings or dicts     ``json``
==========================================  ==========================================

Anything else (Audio, Video, dates, timestamps, ...) is refused with the column's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from stream_plugin.errors import ConfigError

_NUMERIC = {
    *(f"int{bits}" for bits in (8, 16, 32, 64)),
    *(f"uint{bits}" for bits in (8, 16, 32, 64)),
    "float16",
    "float32",
    "float64",
}
_VALUE_TO_MDS = {
    **{name: name for name in _NUMERIC},
    "string": "str",
    "large_string": "str",
    "binary": "bytes",
    "large_binary": "bytes",
    "bool": "json",
}
_LISTS = {"Sequence", "List", "LargeList"}
_ARRAYS = {"Array2D", "Array3D", "Array4D", "Array5D"}


def _kind(feature: Any) -> str:
    return type(feature).__name__


def _is_json(feature: Any) -> bool:
    if isinstance(feature, dict):
        return all(_is_json(value) for value in feature.values())
    if isinstance(feature, list):  # datasets' shorthand for a list of one feature
        return all(_is_json(value) for value in feature)
    kind = _kind(feature)
    if kind in _LISTS:
        return _is_json(feature.feature)
    if kind == "Value":
        return feature.dtype in _NUMERIC or feature.dtype in ("string", "large_string", "bool", "null")
    return kind == "ClassLabel"


def feature_to_mds(name: str, feature: Any) -> str:
    """The MDS encoding a column of ``feature`` is written with; ConfigError when there is none."""
    kind = _kind(feature)
    encoding: str | None = None
    if kind == "Value":
        encoding = _VALUE_TO_MDS.get(feature.dtype)
    elif kind == "ClassLabel":
        encoding = "int64"
    elif kind in _LISTS and _kind(feature.feature) == "Value" and feature.feature.dtype in _NUMERIC:
        encoding = f"ndarray:{feature.feature.dtype}"
    elif kind in _ARRAYS and feature.dtype in _NUMERIC:
        shape = tuple(feature.shape)
        fixed = all(isinstance(size, int) and size > 0 for size in shape)
        encoding = f"ndarray:{feature.dtype}" + (f":{','.join(map(str, shape))}" if fixed else "")
    elif kind == "Image":
        encoding = "png"
    elif _is_json(feature):
        encoding = "json"
    if encoding is None:
        raise ConfigError(
            f"hf_dataset_to_mds: column {name!r}: expected a feature with an MDS encoding (Value, ClassLabel, "
            f"Sequence/List, Array2D-5D, Image, nested dicts), found {feature!r}; cast or drop the column "
            "(dataset.cast_column / remove_columns), or pass columns={...} with an encoding for it"
        )
    return encoding


def infer_columns(features: Mapping[str, Any]) -> dict[str, str]:
    """MDS columns for every feature of a dataset, in the dataset's column order."""
    return {name: feature_to_mds(name, feature) for name, feature in features.items()}


def value_converter(encoding: str) -> Callable[[Any], Any] | None:
    """How a Python value from ``datasets`` becomes what the encoding takes (None: as it is)."""
    if encoding.startswith("ndarray:"):
        dtype = np.dtype(encoding.split(":")[1])
        return lambda value: np.asarray(value, dtype=dtype)
    return None
