"""Every test module's file name is unique across tests/: pytest imports them by basename (rootdir-relative
packages are not used), and a second module of the same name stops the whole session at collection."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_file_name() -> None:
    by_name: defaultdict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        by_name[path.name].append(str(path.relative_to(TESTS)))
    shared = {name: sorted(paths) for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, (
        f"expected every test module's file name to be unique under tests/, found {shared}; rename one of "
        "each pair (e.g. prefix it with its folder: test_parquet_layout.py)"
    )
