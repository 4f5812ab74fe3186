"""Turn the type-tagged values of the fixtures' manifest.json into Python values, and compare decoded ones."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import numpy as np
from support.paths import FIXTURES_DIR

IMAGE_MEAN_TOLERANCE = 1.0  # JPEG is lossy; decoders may differ slightly


def manifest() -> dict[str, Any]:
    return json.loads((FIXTURES_DIR / "manifest.json").read_text())["datasets"]


def to_value(tagged: dict[str, Any]) -> Any:
    """The value a writer is given for a tagged manifest value (images cannot be rebuilt: None)."""
    kind = tagged["type"]
    if kind in ("str", "int", "float", "json"):
        return tagged["value"]
    if kind == "bytes":
        return bytes.fromhex(tagged["hex"])
    if kind == "numpy_scalar":
        return np.dtype(tagged["dtype"]).type(tagged["value"])
    if kind == "ndarray":
        return np.array(tagged["values"], tagged["dtype"]).reshape(tagged["shape"])
    if kind == "decimal":
        return Decimal(tagged["value"])
    return None


def assert_matches(value: Any, tagged: dict[str, Any], *, where: str) -> None:
    """Assert a decoded value equals the manifest's description of it, type included."""
    kind = tagged["type"]
    if kind == "bytes":
        assert isinstance(value, bytes) and value.hex() == tagged["hex"], where
    elif kind in ("str", "int", "float"):
        assert type(value).__name__ == kind and value == tagged["value"], (where, value)
    elif kind == "numpy_scalar":
        assert isinstance(value, np.generic) and value.dtype == np.dtype(tagged["dtype"]), (where, value)
        assert value == np.dtype(tagged["dtype"]).type(tagged["value"]), (where, value)
    elif kind == "ndarray":
        assert isinstance(value, np.ndarray) and value.dtype == np.dtype(tagged["dtype"]), (where, value)
        assert list(value.shape) == tagged["shape"], (where, value.shape)
        assert np.array_equal(value.reshape(-1), np.array(tagged["values"], tagged["dtype"])), where
    elif kind == "decimal":
        assert isinstance(value, Decimal) and value == Decimal(tagged["value"]), (where, value)
    elif kind == "image":
        assert value.mode == tagged["mode"] and list(value.size) == tagged["size"], (where, value)
        mean = float(np.asarray(value.convert("RGB"), np.float64).mean())
        assert abs(mean - tagged["rgb_mean"]) <= IMAGE_MEAN_TOLERANCE, (where, mean)
    elif kind == "json":
        assert json.loads(json.dumps(value)) == tagged["value"], (where, value)
    else:
        raise AssertionError(f"{where}: unknown manifest type tag {kind!r}")
