"""MkDocs hook: a page's relative link to a repository file outside ``docs/`` points at that file on
GitHub in the built site.

The pages link to repository files relatively (``../benchmarks/RESULTS.md``), so they read right on
GitHub and tests/docs/test_links.py can check that every target exists. The site holds only ``docs/``,
so there such a link becomes ``<repo_url>/blob/main/<path>`` (``raw`` for an image) before MkDocs
validates and renders the page.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

BRANCH = "main"
# [text](target) or ![alt](target); the target has no scheme, no leading "/" or "#", and no spaces.
_LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>(?![a-z][a-z0-9+.-]*:|/|#)[^)\s]+)\)")


def repo_url_for(target: str, page_path: str, repo_url: str) -> str | None:
    """The GitHub URL of ``target`` (relative to the page ``page_path`` under docs/) when it leaves
    docs/, else None (a link between pages, which MkDocs resolves and checks itself)."""
    path, _, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_path), path))
    if resolved == "docs" or resolved.startswith("docs/"):
        return None
    if resolved.startswith("../"):
        raise ValueError(
            f"{page_path}: expected a link inside the repository, found {target!r} (it leaves the repository); "
            "link to a repository file relatively, or use an https:// URL"
        )
    return f"{repo_url.rstrip('/')}/blob/{BRANCH}/{resolved}" + (f"#{anchor}" if anchor else "")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    repo_url = config["repo_url"]

    def rewrite(match: re.Match[str]) -> str:
        url = repo_url_for(match["target"], page.file.src_uri, repo_url)
        if url is None:
            return match[0]
        if match["bang"]:
            url = url.replace(f"/blob/{BRANCH}/", f"/raw/{BRANCH}/", 1)
        return f"{match['bang']}[{match['text']}]({url})"

    return _LINK.sub(rewrite, markdown)
