"""Names a package exports but imports on first use (they need torch or a cloud SDK), so that importing
the package stays light: the one module-level ``__getattr__`` of ``stream_plugin``, ``stream_plugin.storage``
and ``stream_plugin.text``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def imported_on_use(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``modules[name]`` when ``name`` is first read."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__


__all__ = ["imported_on_use"]
