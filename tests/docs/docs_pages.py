"""The documentation's Markdown files: README.md and every page of the site under docs/."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from support.paths import REPO_DIR

README = REPO_DIR / "README.md"
DOCS_DIR = REPO_DIR / "docs"
FRAGMENT_MARK = "<!-- readme-test: fragment"
_BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.DOTALL)
_FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.DOTALL | re.MULTILINE)
_HEADING = re.compile(r"^#{1,6} +(?P<title>.+?) *#*$", re.MULTILINE)
# [text](target) and ![alt](target), with an optional "title" after the target.
_LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?: \"[^\"]*\")?\)")


def pages() -> list[Path]:
    """README.md, then the site's pages in name order."""
    return [README, *sorted(DOCS_DIR.rglob("*.md"))]


def page_id(page: Path) -> str:
    return page.relative_to(REPO_DIR).as_posix()


@dataclass(frozen=True)
class Block:
    line: int
    code: str
    fragment: bool


def python_blocks(text: str) -> list[Block]:
    """A page's ```python blocks, with their line numbers and whether they are marked fragments."""
    return [
        Block(
            line=text.count("\n", 0, match.start("code")) + 1,
            code=match.group("code"),
            fragment=match.group("before").startswith(FRAGMENT_MARK),
        )
        for match in _BLOCK.finditer(text)
    ]


def without_code(text: str) -> str:
    """The text with its fenced code blocks blanked (their lines kept), so that a ``#`` comment or a
    bracket in code is taken for neither a heading nor a link."""
    return _FENCE.sub(lambda match: "\n" * match[0].count("\n"), text)


def github_slug(title: str) -> str:
    """The anchor GitHub gives a heading (and Python-Markdown's toc too, for the headings we write):
    lower case, punctuation but ``-`` and ``_`` dropped, each space a ``-``."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated heading gets ``-1``, ``-2``, ... as on GitHub."""
    seen: dict[str, int] = {}
    for match in _HEADING.finditer(without_code(text)):
        slug = github_slug(match["title"])
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def relative_links(text: str) -> list[str]:
    """The targets of the page's links that are not URLs (no scheme), outside code blocks."""
    targets = [match["target"] for match in _LINK.finditer(without_code(text))]
    return [target for target in targets if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


# A test named in prose: ``tests/dir/test_x.py``, optionally ``::test_name`` or ``::Class::test_name``
# with parameters ``[...]``; a lone ``::test_name`` names a test of the file named last.
_TEST_REFERENCE = re.compile(
    r"(?<![\w/.-])(?P<path>tests(?:/[\w.-]+)*/?)(?P<names>(?:::\w+(?:\[[^\]`]*\])?)*)"
    r"|`(?P<lone>(?:::\w+(?:\[[^\]`]*\])?)+)`"
)
# Marks a section (to the next ``##`` heading) that names another project's tests, not ours.
OTHER_PROJECTS_TESTS_MARK = "<!-- docs-test: other project's test ids -->"
_SECTION_START = re.compile(r"^#{1,2} ", re.MULTILINE)


@dataclass(frozen=True)
class NamedTest:
    line: int
    path: str
    names: tuple[str, ...]


def _without_other_projects_tests(text: str) -> str:
    """The text with each marked section (the mark to the next ``#`` or ``##`` heading) blanked."""
    start = text.find(OTHER_PROJECTS_TESTS_MARK)
    while start != -1:
        end_match = _SECTION_START.search(text, start)
        end = end_match.start() if end_match else len(text)
        text = text[:start] + "\n" * text.count("\n", start, end) + text[end:]
        start = text.find(OTHER_PROJECTS_TESTS_MARK, start + 1)
    return text


def named_tests(text: str) -> list[NamedTest]:
    """The tests a page names outside its code blocks (outside sections marked as naming another
    project's tests): each path under ``tests/`` with the test names after it, parameters dropped."""
    text = _without_other_projects_tests(without_code(text))
    references: list[NamedTest] = []
    last_path = ""
    for match in _TEST_REFERENCE.finditer(text):
        names_text = match["names"] if match["path"] else match["lone"]
        names = tuple(re.sub(r"\[.*", "", name) for name in names_text.split("::") if name)
        path = match["path"] or last_path
        if not path:
            continue
        last_path = path
        references.append(NamedTest(text.count("\n", 0, match.start()) + 1, path, names))
    return references
