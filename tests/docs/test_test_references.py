"""Every test the documentation names exists: each ``tests/...`` path in the README and the pages is a
file or folder of this repository, and each ``::test_name`` after it is defined in that file. A claim
linked to a test that was renamed or removed would otherwise point at nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs_pages import OTHER_PROJECTS_TESTS_MARK, NamedTest, named_tests, page_id, pages
from support.paths import REPO_DIR


def missing_tests(references: list[NamedTest]) -> list[str]:
    """Each reference whose path or test name does not exist, with the line it is on."""
    missing = []
    for reference in references:
        path = REPO_DIR / reference.path
        if not path.exists():
            missing.append(f"line {reference.line}: no file or folder {reference.path}")
            continue
        if not reference.names:
            continue
        if not path.is_file():
            missing.append(f"line {reference.line}: {reference.path} is a folder, not a test file")
            continue
        source = path.read_text()
        for name in reference.names:
            if not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", source, re.MULTILINE):
                missing.append(f"line {reference.line}: no test {name} in {reference.path}")
    return missing


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_named_test_exists(page: Path) -> None:
    assert missing_tests(named_tests(page.read_text())) == [], (
        f"{page_id(page)} names tests that do not exist; fix the path or the test name"
    )


def test_a_missing_file_or_test_name_is_reported() -> None:
    text = (
        "Shown by `tests/docs/test_links.py::test_headings_get_githubs_anchors`, `::no_such_test`,\n"
        "`tests/no_such_dir/test_x.py`, and tests/docs/test_links.py::test_gone[a-1] in prose.\n"
        "```python\n# tests/not_checked_in_code.py\n```\n"
        f"## Theirs\n{OTHER_PROJECTS_TESTS_MARK}\n`tests/test_streaming.py::test_theirs`\n"
        "## Ours again\n`tests/test_resume_helper.py::not_here`\n"
    )
    assert missing_tests(named_tests(text)) == [
        "line 1: no test no_such_test in tests/docs/test_links.py",
        "line 2: no file or folder tests/no_such_dir/test_x.py",
        "line 2: no test test_gone in tests/docs/test_links.py",
        "line 10: no test not_here in tests/test_resume_helper.py",
    ]
