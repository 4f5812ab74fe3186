"""``hf://datasets/ORG/NAME[@REVISION]/PATH``: the Hugging Face Hub URL a ``HubStore`` is rooted at.

The revision is written as ``HfFileSystem`` writes it: a branch or tag (``@main``, ``@v1.0``), a commit
sha, or a special ref either URL-encoded (``@refs%2Fconvert%2Fparquet``) or literal
(``@refs/convert/parquet``, ``@refs/pr/3``). No revision means ``main``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from stream_plugin.errors import ConfigError

DEFAULT_REVISION = "main"
COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
# The refs whose name holds a slash, as huggingface_hub's SPECIAL_REFS_REVISION_REGEX names them.
_SPECIAL_REF = re.compile(r"^(refs/convert/\w+|refs/pr/\d+)(?:/|$)")
_FORM = "hf://datasets/ORG/NAME[@REVISION]/PATH"


@dataclass(frozen=True)
class HubLocation:
    """Where an ``hf://`` URL points: a dataset repo, a revision of it, and a folder (or file) in it."""

    repo_id: str
    revision: str
    path: str

    @property
    def is_pinned(self) -> bool:
        """Whether the revision is a commit sha (it cannot move)."""
        return COMMIT_SHA.fullmatch(self.revision) is not None

    def url(self, revision: str | None = None) -> str:
        """The ``hf://`` URL of this location, at ``revision`` (default: its own), the revision encoded."""
        encoded = quote(revision or self.revision, safe="")
        return f"hf://datasets/{self.repo_id}@{encoded}/{self.path}".rstrip("/")


def parse_hub_url(url: str) -> HubLocation:
    """Split ``hf://datasets/ORG/NAME[@REVISION]/PATH``; anything else is a ``ConfigError`` naming the form."""
    if not url.startswith("hf://"):
        raise ConfigError(f"Expected a Hub URL like {_FORM!r}, found {url!r}; start it with hf://datasets/.")
    kind, _, rest = url[len("hf://") :].partition("/")
    if kind != "datasets":
        raise ConfigError(
            f"Expected a Hub dataset URL like {_FORM!r}, found {url!r} (repo type {kind!r}); the hf:// store reads "
            f"dataset repos: write hf://datasets/ORG/NAME/..."
        )
    org, _, rest = rest.partition("/")
    name_and_revision, _, path = rest.partition("/")
    name, at, revision = name_and_revision.partition("@")
    if not org or not name:
        raise ConfigError(
            f"Expected a Hub dataset URL like {_FORM!r}, found {url!r} without ORG/NAME; name the repo as on its "
            f"page (huggingface.co/datasets/ORG/NAME)."
        )
    if at and not revision:
        raise ConfigError(f"Expected a revision after '@' in {url!r}, found none; write @main, @<sha> or drop the '@'.")
    revision = unquote(revision) if revision else DEFAULT_REVISION
    if revision == "refs" and (special := _SPECIAL_REF.match(f"refs/{path}")) is not None:
        revision = special.group(1)  # the literal form: @refs/convert/parquet/PATH
        path = path[len(revision) - len("refs/") :]
    return HubLocation(repo_id=f"{org}/{name}", revision=revision, path=path.strip("/"))
