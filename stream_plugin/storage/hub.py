"""``HubStore``: read-only access to a Hugging Face Hub dataset repo (``hf://datasets/ORG/NAME[@REV]/PATH``)
through ``huggingface_hub`` (extra ``[hf]``).

The revision is pinned: the store resolves it to a commit sha once (``dataset_info``), on first use,
and reads every file at that commit, so the files cannot change under a reader; ``pinned_url`` is the
URL at that commit (``hf://datasets/ORG/NAME@<sha>/PATH``), which a Parquet index records. A pickled
store carries the commit to worker processes.

Requests go through huggingface_hub's shared HTTP session with its headers (``build_hf_headers``) and
its error classes (``hf_raise_for_status``), one request per call: huggingface_hub's own retries are
not used, ``call_with_retries`` owns retrying. A 429 (or a 503 that names a wait) is a
``ThrottledError`` carrying the wait the Hub asked for (``Retry-After``, ``RateLimit``).

The token: the ``token`` option, else huggingface_hub's ``get_token()`` (``HF_TOKEN``, then the token
file that ``hf auth login`` writes). It is sent only in the ``Authorization`` header and never shown.
``endpoint`` (else ``HF_ENDPOINT``, read when the store is made) points the store at a mirror.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import httpx2
from huggingface_hub import HfApi, constants, get_hf_file_metadata, get_session, get_token
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

from stream_plugin.errors import StorageError
from stream_plugin.redaction import REDACTED_LIBRARY_LOGGERS, redact_loggers, redact_url
from stream_plugin.storage.base import (
    ObjectInfo,
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    ThrottledError,
    TransientStorageError,
    answered_size,
    check_complete,
    check_key,
    join_key,
)
from stream_plugin.storage.hub_url import HubLocation, parse_hub_url
from stream_plugin.storage.throttle_hints import requested_wait

CHUNK_SIZE = 1 << 20


def normalized_etag(etag: str | None) -> str | None:
    """An ETag as huggingface_hub's ``get_hf_file_metadata`` gives it: without ``W/`` and quotes."""
    return None if etag is None else etag.lstrip("W/").strip('"')
TRANSIENT_STATUS = frozenset({408, 425})
LOGIN_FIX = "set HF_TOKEN, run 'hf auth login', or pass storage_options={'token': ...}"


class HubStore:
    """An ``ObjectStore`` (and ``RangedStore``) over a folder of a Hub dataset repo, read-only.

    Options: ``token`` (else huggingface_hub's ``get_token()``), ``endpoint`` (else ``HF_ENDPOINT``,
    else huggingface_hub's default).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        endpoint: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        redact_loggers(REDACTED_LIBRARY_LOGGERS)
        env = os.environ if environ is None else environ
        self.url = url
        self.location: HubLocation = parse_hub_url(url)
        self.endpoint = (endpoint or env.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        self.token = token
        self._commit: str | None = self.location.revision if self.location.is_pinned else None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HubStore({redact_url(self.url)!r}, endpoint={self.endpoint!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # --- the commit ---------------------------------------------------------------------------------

    def commit(self, *, timeout: float | None = None) -> str:
        """The commit sha the URL's revision named when first asked (one ``dataset_info`` request)."""
        with self._lock:
            if self._commit is None:
                self._commit = self._resolve(timeout)
            return self._commit

    @property
    def pinned_url(self) -> str:
        """The store's URL at its commit: ``hf://datasets/ORG/NAME@<sha>/PATH``."""
        return self.location.url(self.commit())

    def _resolve(self, timeout: float | None) -> str:
        where = f"{self.location.url()} at {self.endpoint}"
        with self._mapped_errors(where, "resolve the revision of"):
            info = HfApi(endpoint=self.endpoint).dataset_info(
                self.location.repo_id, revision=self.location.revision, token=self._token(), timeout=timeout
            )
        if not info.sha:
            raise StorageError(
                f"Expected the Hub to name the commit of {where}, found none in its answer; pin a commit in the "
                f"URL (hf://datasets/{self.location.repo_id}@<sha>/...)."
            )
        return str(info.sha)

    # --- requests -----------------------------------------------------------------------------------

    def _token(self) -> str | bool:
        """The token to send, or False (send none): the option, else huggingface_hub's ``get_token()``."""
        return self.token or get_token() or False

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers: dict[str, str] = build_hf_headers(token=self._token())
        headers["Accept-Encoding"] = "identity"  # sizes and ranges are of the stored bytes
        return {**headers, **(extra or {})}

    def path_in_repo(self, key: str) -> str:
        """The file's path in the repo for a store-relative ``key``."""
        return join_key(self.location.path, check_key(key, self.url))

    def resolve_url(self, key: str) -> str:
        """The HTTP URL serving ``key`` at the store's commit (the Hub's ``resolve`` endpoint)."""
        repo = self.location.repo_id
        return f"{self.endpoint}/datasets/{repo}/resolve/{self.commit()}/{quote(self.path_in_repo(key))}"

    def _describe(self, key: str) -> str:
        return f"{self.location.url(self._commit)}/{check_key(key, self.url)}"

    @contextmanager
    def _get(self, url: str, timeout: float | None, headers: Mapping[str, str] | None = None) -> Iterator[Any]:
        """A streamed GET through huggingface_hub's session; an error status raises its error class."""
        with get_session().stream(
            "GET", url, headers=self._headers(headers), timeout=timeout, follow_redirects=True
        ) as response:
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            yield response

    # --- error mapping ------------------------------------------------------------------------------

    @contextmanager
    def _mapped_errors(self, where: str, action: str) -> Iterator[None]:
        """Turn huggingface_hub and HTTP failures into the storage error classes, naming the file."""
        try:
            yield
        except HfHubHTTPError as error:
            raise self._status_error(error, where, action) from error
        except (httpx2.TransportError, httpx2.StreamError, ConnectionError, TimeoutError) as error:
            raise TransientStorageError(
                f"Expected to {action} {where}, found {type(error).__name__}: {error}; will retry. If it persists, "
                f"check the network and the endpoint ({self.endpoint})."
            ) from error

    def _status_error(self, error: HfHubHTTPError, where: str, action: str) -> StorageError:
        response = error.response
        status = int(response.status_code) if response is not None else 0
        code = response.headers.get("X-Error-Code") if response is not None else None
        found = f"HTTP {status}" + (f" {code}" if code else "")
        sent = "no token was sent" if self._token() is False else "the token sent has no access to it"
        if status == 401 or (status == 403 and not isinstance(error, GatedRepoError)):
            return RemoteAccessDeniedError(
                f"Expected access to {action} {where}, found {found} ({sent}): the dataset may be private or "
                f"gated; {LOGIN_FIX}, with a token that can read it. Check the repo name too: the Hub answers "
                f"the same for a repo that does not exist."
            )
        if isinstance(error, GatedRepoError):
            return RemoteAccessDeniedError(
                f"Expected access to {action} {where}, found {found}: the dataset is gated; accept its conditions "
                f"at {self.endpoint}/datasets/{self.location.repo_id} and {LOGIN_FIX}."
            )
        if status == 404:
            if isinstance(error, RepositoryNotFoundError):
                hint = f"check ORG/NAME ({self.location.repo_id}); a private dataset needs a token: {LOGIN_FIX}"
            elif isinstance(error, RevisionNotFoundError):
                hint = f"check the revision ({self.location.revision!r}): a branch, tag or commit of the repo"
            else:
                hint = "check the path in the repo"
            return RemoteNotFoundError(f"Expected {where} to exist to {action} it, found {found}; {hint}.")
        headers = response.headers if response is not None else None
        wait = requested_wait(headers)
        if status == 429 or (status == 503 and wait is not None):
            asked = "" if wait is None else f"; it asks for {wait:g}s"
            return ThrottledError(
                f"Expected to {action} {where}, found {found} (the Hub's rate limit{asked}); waiting, then trying "
                f"again. A token raises the limit: {LOGIN_FIX}.",
                wait=wait,
            )
        if status >= 500 or status in TRANSIENT_STATUS:
            return TransientStorageError(f"Expected to {action} {where}, found {found}; will retry.")
        return StorageError(f"Expected to {action} {where}, found {found}; check the URL.")

    # --- RangedStore --------------------------------------------------------------------------------

    def object_info(self, key: str, *, timeout: float | None = None) -> ObjectInfo:
        """The file's size and identity (commit and ETag) from one HEAD on its resolve URL."""
        where = self._describe(key)
        with self._mapped_errors(where, "check"):
            url = self.resolve_url(key)
            metadata = get_hf_file_metadata(
                url, token=self._token(), timeout=timeout, endpoint=self.endpoint, retry_on_errors=False
            )
        if metadata.size is None:
            raise StorageError(
                f"Expected the Hub to give the size of {where}, found none (no X-Linked-Size or Content-Length); "
                f"check the endpoint ({self.endpoint}) is a Hub."
            )
        return ObjectInfo(int(metadata.size), f"commit={metadata.commit_hash} etag={metadata.etag}")

    def read_range(self, key: str, start: int, end: int, *, timeout: float | None = None) -> bytes:
        """Bytes ``[start, end)`` of the file (one GET with ``Range``); another length is transient."""
        if end <= start:
            return b""
        return self._get_range(key, start, end, timeout)[0]

    def read_range_and_info(
        self, key: str, start: int, end: int, *, timeout: float | None = None
    ) -> tuple[bytes, ObjectInfo]:
        """Bytes ``[start, end)`` and ``object_info``'s answer from the same GET: the size from the
        ``Content-Range`` total, the commit and ETag from the Hub's own answer in the redirect chain (the
        one with ``X-Repo-Commit``: ``X-Linked-Etag`` of an LFS file's redirect, else its ``ETag``), as
        the HEAD gives them. Where the chain lacks either, a HEAD."""
        assert start < end, "an empty range makes no request; the caller asks object_info instead"
        data, chain = self._get_range(key, start, end, timeout)
        total = answered_size(chain[-1].status_code, chain[-1].headers.get("Content-Range"), len(data))
        hub = next((answer for answer in chain if answer.headers.get(constants.HUGGINGFACE_HEADER_X_REPO_COMMIT)), None)
        if total is None or hub is None:
            return data, self.object_info(key, timeout=timeout)
        etag = hub.headers.get(constants.HUGGINGFACE_HEADER_X_LINKED_ETAG) or hub.headers.get("ETag")
        commit = hub.headers[constants.HUGGINGFACE_HEADER_X_REPO_COMMIT]
        return data, ObjectInfo(total, f"commit={commit} etag={normalized_etag(etag)}")

    def _get_range(self, key: str, start: int, end: int, timeout: float | None) -> tuple[bytes, list[Any]]:
        """The bytes and the answers that gave them: the redirects followed, then the ranged answer."""
        where = self._describe(key)
        with self._mapped_errors(where, "read"):
            url = self.resolve_url(key)
            with self._get(url, timeout, {"Range": f"bytes={start}-{end - 1}"}) as response:
                whole = response.status_code == 200 and start == 0
                if response.status_code != 206 and not whole:
                    raise StorageError(
                        f"Expected HTTP 206 (Partial Content) to a ranged GET of {where}, found HTTP "
                        f"{response.status_code}; check the endpoint ({self.endpoint}) is a Hub."
                    )
                data = response.read()
        check_complete(f"{where} [{start}, {end})", end - start, len(data))
        return data, [*response.history, response]

    # --- ObjectStore --------------------------------------------------------------------------------

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        """GET the file into ``dest``; a body shorter than announced is transient."""
        where = self._describe(key)
        written = 0
        with (
            self._mapped_errors(where, "download"),
            self._get(self.resolve_url(key), timeout) as response,
            open(dest, "wb") as handle,
        ):
            announced = response.headers.get("Content-Length")
            for chunk in response.iter_raw(CHUNK_SIZE):
                handle.write(chunk)
                written += len(chunk)
        check_complete(where, announced, written)
        return written

    def read_bytes(self, key: str, *, timeout: float | None = None) -> bytes:
        """The whole file."""
        where = self._describe(key)
        with self._mapped_errors(where, "read"), self._get(self.resolve_url(key), timeout) as response:
            announced = response.headers.get("Content-Length")
            data = response.read()
        check_complete(where, announced, len(data))
        return data

    def exists(self, key: str) -> bool:
        """Whether the file exists at the store's commit (404 → False)."""
        try:
            self.object_info(key)
        except RemoteNotFoundError:
            return False
        return True

    def identity(self, key: str, *, timeout: float | None = None) -> str | None:
        """The commit and the file's ETag: the same at the pinned commit for as long as the repo exists."""
        return self.object_info(key, timeout=timeout).identity

    def list(self, prefix: str = "") -> list[str]:
        """Files under ``prefix`` at the store's commit, relative to the store root, sorted."""
        relative_prefix = check_key(prefix, self.url)
        folder = join_key(self.location.path, relative_prefix.rpartition("/")[0])
        where = f"{self.location.url(self._commit)} at {self.endpoint}"
        root = f"{self.location.path}/" if self.location.path else ""
        keys: list[str] = []
        try:
            with self._mapped_errors(where, "list"):
                encoded = f"/{quote(folder, safe='')}" if folder else ""
                page: str | None = (
                    f"{self.endpoint}/api/datasets/{self.location.repo_id}/tree/{self.commit()}{encoded}"
                    "?recursive=true&expand=false"
                )
                while page is not None:
                    with self._get(page, None) as response:
                        response.read()
                        entries = response.json()
                        page = response.links.get("next", {}).get("url")
                    keys.extend(
                        entry["path"][len(root) :]
                        for entry in entries
                        if entry.get("type") == "file" and entry["path"].startswith(root)
                    )
        except RemoteNotFoundError as error:
            if isinstance(error.__cause__, RemoteEntryNotFoundError):
                return []  # no such folder at this commit: nothing under the prefix
            raise
        return sorted(key for key in keys if key.startswith(relative_prefix))

    def upload(self, src: str | os.PathLike[str], key: str) -> None:
        """Always fails: the hf:// store is read-only."""
        raise StorageError(
            f"Expected a writable store for {key!r}, found the read-only Hub store {redact_url(self.url)!r}; write "
            f"the index or dataset to a local folder or bucket of yours (index_parquet(..., out=...)), or upload "
            f"to the Hub with huggingface_hub's HfApi.upload_folder."
        )
