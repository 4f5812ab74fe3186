"""The relative links of the README and of every documentation page lead somewhere: the file exists
(a page, or a repository file such as ``benchmarks/RESULTS.md``), and an ``#anchor`` names one of the
target's headings. URLs (``https://...``) are not fetched.

``mkdocs build --strict`` (test_site.py) checks the links between pages again, with the site's own
anchors; this test also covers the README and links that leave ``docs/``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from docs_pages import DOCS_DIR, README, anchors, github_slug, page_id, pages, relative_links
from support.paths import REPO_DIR


def broken_links(text: str, page: Path) -> list[str]:
    """Each relative link of ``text``, the content of ``page``, that leads nowhere, with the reason."""
    broken = []
    for target in relative_links(text):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.is_relative_to(REPO_DIR) or not (resolved == page or resolved.exists()):
            broken.append(f"{target}: no file {resolved}")
            continue
        if (
            anchor
            and resolved.suffix == ".md"
            and anchor not in anchors(text if resolved == page else resolved.read_text())
        ):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {resolved.name}")
    return broken


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page.read_text(), page) == [], (
        f"{page_id(page)} has broken links; fix the path or the anchor"
    )


def test_a_missing_file_or_heading_is_a_broken_link() -> None:
    text = (
        "# Title\n\n[ok](index.md) [gone](no-such-page.md) [bad](../benchmarks/RESULTS.md#no-such-heading)\n"
    )
    text += "[here](#title) [not here](#nope) [repo](../benchmarks/RESULTS.md#resume-latency)\n"
    broken = broken_links(text, DOCS_DIR / "a-page-under-test.md")
    assert [reason.split(":")[0] for reason in broken] == [
        "no-such-page.md",
        "../benchmarks/RESULTS.md#no-such-heading",
        "#nope",
    ]


def test_the_readme_links_every_page_of_the_site() -> None:
    linked = {
        (README.parent / target.partition("#")[0]).resolve() for target in relative_links(README.read_text())
    }
    unlinked = [page_id(page) for page in sorted(DOCS_DIR.glob("*.md")) if page.resolve() not in linked]
    assert unlinked == [], "add a link to each of these pages to the README's list of pages"


def test_headings_get_githubs_anchors() -> None:
    assert (
        github_slug("Preemption: exit codes under each launcher")
        == "preemption-exit-codes-under-each-launcher"
    )
    assert github_slug("llm-foundry's `text` loader") == "llm-foundrys-text-loader"
    assert github_slug("Million-shard indexes (issue 17 §2)") == "million-shard-indexes-issue-17-2"
    assert anchors("# A\n\n```bash\n# not a heading\n```\n\n## A\n") == {"a", "a-1"}


def _repo_links_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("repo_links", DOCS_DIR / "hooks" / "repo_links.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_links_repository_files_on_github() -> None:
    hook = _repo_links_hook()
    repo = "https://github.com/o/r"
    assert hook.repo_url_for("../benchmarks/RESULTS.md#resume-latency", "benchmarks.md", repo) == (
        "https://github.com/o/r/blob/main/benchmarks/RESULTS.md#resume-latency"
    )
    assert hook.repo_url_for("order.md#the-order-contract", "reading.md", repo) is None
    with pytest.raises(ValueError, match=r"expected a link inside the repository, found '../../x.md'"):
        hook.repo_url_for("../../x.md", "reading.md", repo)
