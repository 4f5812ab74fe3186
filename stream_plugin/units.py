"""Human-friendly sizes and counts: ``"64mb"`` bytes and ``"100k"`` samples, as MosaicML accepts them."""

from __future__ import annotations

import math
import re

from stream_plugin.errors import ConfigError

# Byte units are binary, as in MosaicML Streaming ("64mb" == 64 * 2**20).
_BYTE_UNITS = {
    "b": 1,
    "kb": 1 << 10,
    "mb": 1 << 20,
    "gb": 1 << 30,
    "tb": 1 << 40,
    "pb": 1 << 50,
    "eb": 1 << 60,
    "zb": 1 << 70,
    "yb": 1 << 80,
}
# IEC names ("64MiB") mean the same binary units.
_BYTE_UNITS.update({f"{unit[0]}ib": factor for unit, factor in list(_BYTE_UNITS.items()) if unit != "b"})
# Count suffixes are decimal, as in MosaicML Streaming ("100k" == 100_000 samples).
_COUNT_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"  # "64", "35.78", "1.", ".5"
_BYTES_PATTERN = re.compile(rf"^\s*{_NUMBER}\s*([a-z]*)\s*$")


def _whole(value: float, name: str, example: str) -> int:
    """A float that holds a whole number (YAML reads ``1e9`` so); MosaicML truncates any float."""
    if not value.is_integer() or value < 0:
        raise ConfigError(
            f"{name}: expected a whole number >= 0 or a string such as {example!r}, found {value!r}; pass "
            f"{max(0, int(value))} or a string with a unit"
        )
    return int(value)


def parse_bytes(value: int | float | str, *, name: str = "size") -> int:
    """Return a byte count from an int or a string such as ``"64mb"``, ``"35.78kb"`` or ``"64MiB"``."""
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected an int or a string such as '64mb', found bool {value!r}")
    if isinstance(value, float):
        return _whole(value, name, "64mb")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{name}: expected a byte count >= 0, found {value}; pass a positive size")
        return value
    if not isinstance(value, str):
        raise ConfigError(
            f"{name}: expected an int or a string such as '64mb', found {type(value).__name__} {value!r}"
        )
    match = _BYTES_PATTERN.match(value.lower())
    unit = match.group(2) if match else None
    if match is None or unit not in _BYTE_UNITS and unit != "":
        raise ConfigError(
            f"{name}: expected a number with a unit among {sorted(_BYTE_UNITS)} (such as '64mb'), "
            f"found {value!r} (Unsupported value/suffix); write the size as a number and one unit"
        )
    return int(float(match.group(1)) * _BYTE_UNITS.get(unit or "b", 1))


_COUNT_PATTERN = re.compile(rf"^\s*{_NUMBER}\s*([kmbt]?)\s*$")


def parse_count(value: int | float | str, *, name: str = "count") -> int:
    """Return a sample count from an int or a string such as ``"100k"`` or ``"1.5m"``."""
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected an int or a string such as '100k', found bool {value!r}")
    if isinstance(value, float):
        return _whole(value, name, "100k")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{name}: expected a count >= 0, found {value}")
        return value
    if not isinstance(value, str):
        raise ConfigError(
            f"{name}: expected an int or a string such as '100k', found {type(value).__name__} {value!r}"
        )
    match = _COUNT_PATTERN.match(value.lower())
    if match is None:
        raise ConfigError(
            f"{name}: expected a number with an optional suffix k/m/b/t (such as '100k'), found {value!r} "
            "(Unsupported value/suffix); write the count as a number and at most one suffix"
        )
    return int(round(float(match.group(1)) * _COUNT_UNITS[match.group(2)]))


def format_bytes(size: float) -> str:
    """``size`` bytes for people: ``512 B``, ``1.5 KiB``, ``12.3 MiB``, ..."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def parse_whole_number(value: object, *, name: str, meaning: str, fix: str) -> int:
    """A whole number >= 1, as an int or a whole float (YAML files and llm-foundry pass ``2048.0``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 1
        or int(value) != value
    ):
        raise ConfigError(f"{name}: expected a whole number >= 1 ({meaning}), found {value!r}; {fix}")
    return int(value)


__all__ = ["format_bytes", "parse_bytes", "parse_count", "parse_whole_number"]
