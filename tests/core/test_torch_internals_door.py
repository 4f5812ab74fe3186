"""torch's private internals are used behind one door: no module of ``stream_plugin`` outside
``reading/torch_internals/`` names one (read from the source; no module is imported)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stream_plugin"
DOOR = PACKAGE / "reading" / "torch_internals"
# Private names of torch's DataLoader machinery, as attributes, imports or overridden methods.
TORCH_PRIVATES = frozenset(
    {
        "_BaseDataLoaderIter",
        "_MultiProcessingDataLoaderIter",
        "_SingleProcessDataLoaderIter",
        "_DatasetKind",
        "_IterableDatasetStopIteration",
        "_ResumeIteration",
        "_worker_loop",
        "_pin_memory_loop",
        "_iterator",
        "_get_iterator",
        "_next_data",
        "_process_data",
        "_try_get_data",
        "_shutdown_workers",
        "_worker_result_queue",
        "_index_queues",
        "_workers_done_event",
        "_set_worker_pids",
        "_remove_worker_pids",
        "_set_SIGCHLD_handler",
        "_dataset_kind",
        "_index_sampler",
        "_auto_collation",
        "_new_shared",
        "_share_fd_cpu_",
        "_share_filename_cpu_",
    }
)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _attribute_chain(node: ast.AST) -> list[str]:
    """``torch.utils.data._utils`` as ``["torch", "utils", "data", "_utils"]``; [] if not rooted at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else []


def violations(source: str) -> Iterator[str]:
    """Each use of a torch private in ``source``: line and what it names."""
    for node in ast.walk(ast.parse(source)):
        found = None
        if isinstance(node, ast.Import):
            found = next(
                (a.name for a in node.names if a.name.split(".")[0] == "torch" and _has_private(a.name)), None
            )
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            names = [alias.name for alias in node.names]
            if _has_private(node.module or "") or any(_is_private(name) for name in names):
                found = f"from {node.module} import {', '.join(names)}"
        elif isinstance(node, ast.Attribute):
            chain = _attribute_chain(node)
            if node.attr in TORCH_PRIVATES or (chain[:1] == ["torch"] and any(map(_is_private, chain))):
                found = ".".join(chain) or node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in TORCH_PRIVATES:
            found = f"def {node.name}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in TORCH_PRIVATES:
            found = repr(node.value)  # getattr(obj, "_iterator")
        if found is not None:
            yield f"line {getattr(node, 'lineno', '?')}: {found}"


def _has_private(dotted: str) -> bool:
    return any(_is_private(part) for part in dotted.split("."))


def test_no_module_outside_the_door_names_a_torch_private() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if DOOR in path.parents:
            continue
        uses = list(violations(path.read_text(encoding="utf-8")))
        if uses:
            found[str(path.relative_to(ROOT))] = uses
    assert found == {}, (
        f"expected torch's private internals only under {DOOR.relative_to(ROOT)}/, found them in {found}; move "
        "the code that needs them behind make_iterator (and its version gate)"
    )


def test_the_door_holds_the_torch_privates_it_is_there_for() -> None:
    inside = "\n".join(path.read_text(encoding="utf-8") for path in sorted(DOOR.rglob("*.py")))
    uses = "\n".join(violations(inside))
    for name in ("_BaseDataLoaderIter", "_worker_loop", "_set_worker_pids", "_iterator", "_shutdown_workers"):
        assert name in uses  # the scan sees them where they are allowed


def test_the_scan_finds_every_kind_of_use() -> None:
    source = (
        "import torch._utils\n"
        "from torch.utils.data import _utils\n"
        "from torch.utils.data.dataloader import _BaseDataLoaderIter\n"
        "x = loader._iterator\n"
        "y = torch.UntypedStorage._new_shared(8)\n"
        "z = getattr(loader, '_iterator', None)\n"
        "class L:\n"
        "    def _get_iterator(self): ...\n"
    )
    assert [use.split(":")[0] for use in violations(source)].count("line 4") == 1
    assert sorted({int(use.split(":")[0].split()[1]) for use in violations(source)}) == [1, 2, 3, 4, 5, 6, 8]
    assert (
        list(violations("import torch\nfrom torch.utils.data import DataLoader\nv = torch.__version__\n"))
        == []
    )
