"""A loopback Hugging Face Hub for tests: the endpoints ``huggingface_hub`` calls (through ``HF_ENDPOINT``).

* ``GET /api/datasets/ORG/NAME[/revision/REV]``: the dataset's info, with the commit ``sha`` the
  revision names (``RevisionNotFound`` / ``RepoNotFound`` otherwise);
* ``GET /api/datasets/ORG/NAME/tree/REV[/PATH]?recursive=...``: the files and folders, paginated
  with a ``Link: <...>; rel="next"`` header (``page_size`` entries a page);
* ``HEAD`` / ``GET /datasets/ORG/NAME/resolve/REV/PATH``: a small file is answered in place (``ETag``
  its git blob id, ``X-Repo-Commit``, ``Content-Length``); a large one (over ``lfs_threshold``) as the
  Hub answers an LFS file: a 302 to a CDN on another port (another origin, as on the Hub), with
  ``X-Linked-Size`` and ``X-Linked-Etag`` (its sha256). GETs honour ``Range`` (206).

A private repo wants ``Authorization: Bearer <token>``; without it the answer is 401 ``RepoNotFound``,
as on the Hub (which answers a missing repo the same way). A gated repo's files want a token whose
user accepted its conditions (401, else 403 ``GatedRepo``). ``throttle(n)`` answers the next ``n``
matching requests with 429 and the IETF ``RateLimit`` headers the Hub sends. Every request is recorded
(``requests``) with the server's own clock, the status and body size it got and the ``Authorization``
it carried.
"""

from __future__ import annotations

import hashlib
import http.server
import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest
from support.ranged_http import parse_range

PAGE_SIZE = 50
LFS_THRESHOLD = 1024


@dataclass(frozen=True)
class HubRequest:
    """One request as the server saw it: ``at`` is the server's ``time.monotonic()`` on arrival."""

    method: str
    path: str
    authorization: str | None
    range: str | None
    at: float
    status: int
    sent: int  # body bytes sent (0 for HEAD)


@dataclass
class HubRepo:
    """A dataset repo: its commits (sha → files) and refs (branch, tag or special ref → sha)."""

    private: bool
    gated: bool = False  # files need a token whose user accepted the conditions (``gate_accepted``)
    gate_accepted: bool = False
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)

    def sha_of(self, revision: str) -> str | None:
        return self.refs.get(revision) or (revision if revision in self.commits else None)


@dataclass
class _Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def git_blob_id(data: bytes) -> str:
    """The git object id of a file's bytes (what the Hub sends as a small file's ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324  (git's own hash)


class HubServer:
    """The loopback Hub (see the module docstring); ``endpoint_url`` goes in ``HF_ENDPOINT``."""

    def __init__(self, *, token: str | None = None, page_size: int = PAGE_SIZE, lfs_threshold: int = LFS_THRESHOLD):
        self.token = token
        self.page_size = page_size
        self.lfs_threshold = lfs_threshold
        self.repos: dict[str, HubRepo] = {}
        self.requests: list[HubRequest] = []
        self._blobs: dict[str, bytes] = {}  # the CDN's: sha256 -> bytes of the LFS files resolved so far
        self._throttles: list[tuple[str, int, int]] = []  # (path part, requests left, reset seconds)
        self._lock = threading.Lock()
        self._commits = itertools.count(1)
        self._hub = self._serve(self._answer_hub)
        self._cdn = self._serve(self._answer_cdn)
        self.endpoint_url = f"http://127.0.0.1:{self._hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self._cdn.server_address[1]}"

    # --- arranging data -----------------------------------------------------------------------------

    def commit(self, repo_id: str, files: dict[str, bytes], *, private: bool = False, ref: str = "main") -> str:
        """A new commit holding exactly ``files``, which ``ref`` now names; returns its sha."""
        with self._lock:
            repo = self.repos.setdefault(repo_id, HubRepo(private=private))
            sha = hashlib.sha1(f"{repo_id}:{next(self._commits)}".encode()).hexdigest()  # noqa: S324
            repo.commits[sha] = dict(files)
            repo.refs[ref] = sha
            return sha

    def throttle(self, count: int, *, reset_seconds: int = 1, path_contains: str = "") -> None:
        """Answer the next ``count`` requests whose path contains ``path_contains`` with 429 and
        ``RateLimit: "api";r=0;t=<reset_seconds>``."""
        with self._lock:
            self._throttles.append((path_contains, count, reset_seconds))

    def requests_to(self, path_contains: str) -> list[HubRequest]:
        with self._lock:
            return [request for request in self.requests if path_contains in request.path]

    # --- serving ------------------------------------------------------------------------------------

    def _serve(self, answer: object) -> http.server.ThreadingHTTPServer:
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def _handle(self) -> None:
                arrived = time.monotonic()
                reply = hub._throttled(self.path) or answer(self)  # type: ignore[operator]
                with hub._lock:
                    hub.requests.append(
                        HubRequest(
                            self.command, self.path, self.headers.get("Authorization"),
                            self.headers.get("Range"), arrived, reply.status,
                            0 if self.command == "HEAD" else len(reply.body),
                        )
                    )
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if "Content-Length" not in reply.headers:
                    self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(reply.body)

            do_GET = do_HEAD = _handle  # noqa: N815

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return server

    def close(self) -> None:
        for server in (self._hub, self._cdn):
            server.shutdown()
            server.server_close()

    def _throttled(self, path: str) -> _Answer | None:
        with self._lock:
            for number, (part, left, reset) in enumerate(self._throttles):
                if part in path and left > 0:
                    self._throttles[number] = (part, left - 1, reset)
                    return _Answer(
                        429,
                        {
                            "RateLimit": f'"api";r=0;t={reset}',
                            "RateLimit-Policy": '"fixed window";"api";q=3;w=300',
                            "X-Error-Message": "rate limited",
                        },
                    )
        return None

    @staticmethod
    def _error(status: int, code: str, message: str) -> _Answer:
        body = json.dumps({"error": message}).encode()
        return _Answer(status, {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}, body)

    def _repo(self, handler: http.server.BaseHTTPRequestHandler, repo_id: str) -> HubRepo | _Answer:
        repo = self.repos.get(repo_id)
        authorization = handler.headers.get("Authorization")
        allowed = self.token is not None and authorization == f"Bearer {self.token}"
        if repo is None or (repo.private and not allowed):
            if authorization is None or repo is not None:
                return self._error(401, "RepoNotFound", "Invalid username or password.")
            return self._error(404, "RepoNotFound", "Repository not found")
        return repo

    def _answer_hub(self, handler: http.server.BaseHTTPRequestHandler) -> _Answer:
        url = urlsplit(handler.path)
        parts = url.path.strip("/").split("/")
        if parts[:2] == ["api", "datasets"] and len(parts) >= 4:
            repo_id = f"{parts[2]}/{parts[3]}"
            found = self._repo(handler, repo_id)
            if isinstance(found, _Answer):
                return found
            if len(parts) == 4 or parts[4] == "revision":
                return self._info(repo_id, found, unquote(parts[5]) if len(parts) > 5 else "main")
            if parts[4] == "tree" and len(parts) >= 6:
                query = parse_qs(url.query)
                return self._tree(
                    handler, found, unquote(parts[5]), unquote("/".join(parts[6:])), query
                )
        if parts[:1] == ["datasets"] and len(parts) >= 6 and parts[3] == "resolve":
            found = self._repo(handler, f"{parts[1]}/{parts[2]}")
            if isinstance(found, _Answer):
                return found
            if found.gated and not found.gate_accepted:
                if handler.headers.get("Authorization") is None:
                    return self._error(401, "GatedRepo", "Access to this dataset is restricted: log in.")
                return self._error(403, "GatedRepo", "Access to this dataset is restricted: accept its conditions.")
            return self._resolve(handler, found, unquote(parts[4]), unquote("/".join(parts[5:])))
        return self._error(404, "NotFound", f"no route for {url.path}")

    def _info(self, repo_id: str, repo: HubRepo, revision: str) -> _Answer:
        sha = repo.sha_of(revision)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        siblings = [{"rfilename": path} for path in sorted(repo.commits[sha])]
        body = {"id": repo_id, "sha": sha, "private": repo.private, "siblings": siblings, "tags": []}
        return _Answer(200, {"Content-Type": "application/json"}, json.dumps(body).encode())

    def _tree(
        self, handler: http.server.BaseHTTPRequestHandler, repo: HubRepo, revision: str, folder: str,
        query: dict[str, list[str]],
    ) -> _Answer:
        sha = repo.sha_of(revision)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        prefix = f"{folder}/" if folder else ""
        entries: dict[str, dict[str, object]] = {}
        for path, data in sorted(repo.commits[sha].items()):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :].split("/")
            for depth in range(1, len(rest)):  # the folders on the way
                if recursive or depth == 1:
                    name = prefix + "/".join(rest[:depth])
                    entries.setdefault(name, {"type": "directory", "oid": "0" * 40, "size": 0, "path": name})
            if recursive or len(rest) == 1:
                entries[path] = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path}
        if folder and not entries:
            return self._error(404, "EntryNotFound", f"{folder} does not exist on {revision}")
        listing = [entries[name] for name in sorted(entries)]
        start = int(query.get("cursor", ["0"])[0])
        page = listing[start : start + self.page_size]
        headers = {"Content-Type": "application/json"}
        if start + self.page_size < len(listing):
            base = urlsplit(handler.path).path
            headers["Link"] = (
                f'<{self.endpoint_url}{base}?recursive={str(recursive).lower()}&cursor={start + self.page_size}>; '
                'rel="next"'
            )
        return _Answer(200, headers, json.dumps(page).encode())

    def _resolve(self, handler: http.server.BaseHTTPRequestHandler, repo: HubRepo, revision: str, path: str) -> _Answer:
        sha = repo.sha_of(revision)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        data = repo.commits[sha].get(path)
        if data is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist on {revision}")
        headers = {"X-Repo-Commit": sha, "Accept-Ranges": "bytes"}
        if len(data) > self.lfs_threshold:
            digest = hashlib.sha256(data).hexdigest()
            with self._lock:
                self._blobs[digest] = data
            headers.update(
                {
                    "Location": f"{self.cdn_url}/blobs/{digest}?signature=cdn-signed",
                    "X-Linked-Size": str(len(data)),
                    "X-Linked-Etag": f'"{digest}"',
                    "ETag": f'W/"{git_blob_id(data)}"',
                }
            )
            return _Answer(302, headers)
        return _ranged(handler, data, {**headers, "ETag": f'"{git_blob_id(data)}"'})

    def _answer_cdn(self, handler: http.server.BaseHTTPRequestHandler) -> _Answer:
        digest = urlsplit(handler.path).path.rpartition("/")[2]
        data = self._blobs.get(digest)
        if data is None:
            return _Answer(404)
        return _ranged(handler, data, {"ETag": f'"{digest}"', "Accept-Ranges": "bytes"})


def _ranged(handler: http.server.BaseHTTPRequestHandler, data: bytes, headers: dict[str, str]) -> _Answer:
    """``data`` whole (200), or the part a ``Range`` header asks for (206; 416 outside it)."""
    try:
        wanted = parse_range(handler.headers.get("Range"), len(data))
    except ValueError:
        return _Answer(416, {"Content-Range": f"bytes */{len(data)}"})
    if wanted is None:
        return _Answer(200, headers, data)
    start, end = wanted
    return _Answer(206, {**headers, "Content-Range": f"bytes {start}-{end - 1}/{len(data)}"}, data[start:end])


def quoted_revision(revision: str) -> str:
    """A revision as a URL path segment (``refs/convert/parquet`` → ``refs%2Fconvert%2Fparquet``)."""
    return quote(revision, safe="")


def isolate_from_hub_config(monkeypatch: pytest.MonkeyPatch, home: Path, endpoint_url: str) -> None:
    """Keep huggingface_hub off the developer's token and cache, and off the real Hub: ``HF_ENDPOINT``
    (and huggingface_hub's own copy of it, read at import) is ``endpoint_url``; no ``HF_TOKEN``; the
    token file and the agent-registry cache under ``home`` (the token file absent unless a test writes
    it); telemetry and offline mode off."""
    from huggingface_hub import constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_ENDPOINT", endpoint_url)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint_url)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(home / "agent-harnesses.json"), raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def hub_server(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    """A fresh loopback Hub per test, with ``HF_ENDPOINT`` pointing at it and the token isolated."""
    server = HubServer()
    isolate_from_hub_config(monkeypatch, tmp_path_factory.mktemp("hf-home"), server.endpoint_url)
    try:
        yield server
    finally:
        server.close()
