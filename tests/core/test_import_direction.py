"""The direction of imports inside the project, read from the source (no module is imported).

- ``order/`` (the pure sample-order maths) imports nothing of the project but ``errors``;
- the core (``stream_plugin``) never imports the integrations, Lightning or Composer;
- the integrations import only public names of the core (those a module lists in ``__all__``);
- no import cycle among the project's modules, counting imports inside functions (they only hide a
  cycle until the function runs) and leaving out those under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "stream_plugin": ROOT / "stream_plugin",
    "stream_plugin_lightning": ROOT / "integrations" / "lightning" / "stream_plugin_lightning",
    "stream_plugin_composer": ROOT / "integrations" / "composer" / "stream_plugin_composer",
    "stream_plugin_transformers": ROOT / "integrations" / "transformers" / "stream_plugin_transformers",
}
INTEGRATIONS = (
    "stream_plugin_lightning",
    "stream_plugin_composer",
    "stream_plugin_transformers",
    "lightning",
    "pytorch_lightning",
    "composer",
    "accelerate",
)


def _module_name(package: str, folder: Path, path: Path) -> str:
    parts = [package, *path.relative_to(folder).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            found[_module_name(package, folder, path)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement except those under ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def _imports(module: str) -> Iterator[tuple[str, str | None]]:
    """``(imported module, imported name or None)`` for each runtime import of ``module``."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in _runtime_imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        else:
            source = _resolve(module, node)
            for alias in node.names:
                yield source, alias.name


def _edges(module: str) -> set[str]:
    """The project modules ``module`` imports (a name that is a submodule counts as that module)."""
    targets = set()
    for source, name in _imports(module):
        if name is not None and f"{source}.{name}" in MODULES:
            targets.add(f"{source}.{name}")
        elif source in MODULES:
            targets.add(source)
    targets.discard(module)
    return targets


def _public_names(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return {element.value for element in node.value.elts}  # type: ignore[attr-defined]
    return set()


def test_order_imports_only_errors_from_the_project() -> None:
    bad = [
        (module, source)
        for module in MODULES
        if module.startswith("stream_plugin.order")
        for source, _ in _imports(module)
        if source.startswith("stream_plugin") and not source.startswith(("stream_plugin.order", "stream_plugin.errors"))
    ]
    assert not bad, f"order/ must import only stream_plugin.errors from the project; found {bad}"


def test_the_core_never_imports_the_integrations() -> None:
    bad = [
        (module, source)
        for module in MODULES
        if module.split(".")[0] == "stream_plugin"
        for source, _ in _imports(module)
        if source.split(".")[0] in INTEGRATIONS
    ]
    assert not bad, f"stream_plugin must not import an integration, Lightning or Composer; found {bad}"


def test_integrations_import_only_public_names_of_the_core() -> None:
    bad = []
    for module in MODULES:
        if module.split(".")[0] == "stream_plugin":
            continue
        for source, name in _imports(module):
            if source.split(".")[0] != "stream_plugin" or source not in MODULES:
                continue
            if name is None or name.startswith("_") and name != "__version__" or f"{source}.{name}" not in MODULES and name not in _public_names(source):
                bad.append((module, source, name))
    assert not bad, (
        "integrations must import only names a core module lists in __all__; found (importer, module, name): "
        f"{bad}. Export the name from the core (its module's __all__, or stream_plugin's) or stop using it"
    )


def _cycle() -> list[str] | None:
    """One import cycle among the project's modules, or None (iterative depth-first search)."""
    edges = {module: sorted(_edges(module)) for module in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in MODULES:
        if root in state:
            continue
        path = [root]
        children = [iter(edges[root])]
        state[root] = 1
        while path:
            child = next(children[-1], None)
            if child is None:
                state[path.pop()] = 2
                children.pop()
            elif state.get(child) == 1:
                return [*path[path.index(child) :], child]
            elif child not in state:
                state[child] = 1
                path.append(child)
                children.append(iter(edges[child]))
    return None


def test_no_import_cycles() -> None:
    cycle = _cycle()
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}; move the shared piece into a module both import"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from stream_plugin.reading.dataset import X\n", {"stream_plugin.reading.dataset"}),
        ("from stream_plugin import reading\n", {"stream_plugin.reading"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import stream_plugin.cli\n", set()),
        ("def f():\n    from stream_plugin.cli import main\n", {"stream_plugin.cli"}),
    ],
)
def test_the_import_reader_sees_what_python_would_import(
    source: str, expected: set[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    monkeypatch.setitem(MODULES, "stream_plugin.probe", path)
    assert _edges("stream_plugin.probe") == expected
