"""Importing an optional dependency with a message that names the extra which installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from stream_plugin.errors import MissingDependencyError


def require_extra(module: str, *, extra: str, needed_by: str) -> ModuleType:
    """Import ``module``, or raise ``MissingDependencyError`` saying to install ``stream-plugin[extra]``."""
    try:
        imported = importlib.import_module(module)
    except ImportError as error:
        found: str = f"it is not importable ({error})"
        cause: BaseException | None = error
    else:
        if getattr(imported, "__file__", None) is not None:
            return imported
        # A folder that happens to share the name (such as tests/composer) imports as a namespace package.
        found, cause = f"only a folder of that name at {list(imported.__path__)}", None
    raise MissingDependencyError(
        f"{needed_by} needs the {module!r} package, found {found}; install it with: "
        f"pip install 'stream-plugin[{extra}]' (or pip install '.[{extra}]' in a checkout)"
    ) from cause


__all__ = ["require_extra"]
