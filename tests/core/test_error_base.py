"""Every error class of the package derives from ``StreamPluginError`` (docs/api.md, "Errors"), so one
``except StreamPluginError`` catches whatever we raise; the builtins each one also derives from, for
MosaicML's ``except`` clauses, are test_errors.py's."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import stream_plugin
from stream_plugin.errors import StreamPluginError

PACKAGE = Path(stream_plugin.__file__).resolve().parent


def error_classes() -> list[tuple[str, str]]:
    """(module, class name) of each class the package defines whose name ends in ``Error``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(("stream_plugin", *path.relative_to(PACKAGE).with_suffix("").parts))
        module = module.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                found.append((module, node.name))
    return found


def test_every_error_class_of_the_package_derives_from_stream_plugin_error() -> None:
    classes = error_classes()
    assert len(classes) >= 25, classes  # the scan finds them (errors.py alone defines 19)
    outside = [
        f"{module}.{name}"
        for module, name in classes
        if not issubclass(getattr(importlib.import_module(module), name), StreamPluginError)
    ]
    assert outside == [], "derive each of these from StreamPluginError (or one of its subclasses)"
