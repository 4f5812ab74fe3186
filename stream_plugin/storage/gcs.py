"""``GcsStore``: Google Cloud Storage (``gs://bucket/prefix``) through ``google-cloud-storage``.

Credentials, in order: a ``credentials_file`` option (a service-account JSON); MosaicML's HMAC keys
(``GCS_KEY`` / ``GCS_SECRET``, or the ``hmac_key_id`` / ``hmac_secret`` options), which go through
GCS's S3-compatible XML API (see ``gcs_hmac.py``); Application Default Credentials (which read
``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's login, or the metadata server); with none found,
anonymous requests, which public buckets accept.

``STORAGE_EMULATOR_HOST`` points the client at an emulator, as in Google's own client; the
``endpoint_url`` option does the same per store. ``requester_pays_project`` bills requests to that
project (requester-pays buckets).

The client's own retries are off (``retry=None`` on every call): ``call_with_retries`` owns retrying.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import google.api_core.exceptions as api_exceptions
import google.auth.exceptions as auth_exceptions
import requests.exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.cloud.storage.exceptions import DataCorruption, InvalidResponse

from stream_plugin.errors import StorageError
from stream_plugin.redaction import redact_url
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
from stream_plugin.storage.gcs_url import parse_gcs_url
from stream_plugin.storage.per_process import PerProcess
from stream_plugin.storage.throttle_hints import requested_wait

if TYPE_CHECKING:
    from stream_plugin.storage.gcs_hmac import GcsHmacStore

EMULATOR_ENV_VAR = "STORAGE_EMULATOR_HOST"
HMAC_ENV_VARS = ("GCS_KEY", "GCS_SECRET")
TRANSIENT_STATUS = frozenset({408, 429})


def open_gcs_store(
    url: str,
    *,
    project: str | None = None,
    credentials_file: str | None = None,
    anonymous: bool | None = None,
    endpoint_url: str | None = None,
    requester_pays_project: str | None = None,
    hmac_key_id: str | None = None,
    hmac_secret: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> GcsStore | GcsHmacStore:
    """The store for a ``gs://`` URL: HMAC keys (option, else ``GCS_KEY`` / ``GCS_SECRET``) select the
    S3-compatible API, as in MosaicML; otherwise the JSON API through ``google-cloud-storage``."""
    env = os.environ if environ is None else environ
    if credentials_file is None and anonymous is None:
        key_id = hmac_key_id or env.get(HMAC_ENV_VARS[0])
        secret = hmac_secret or env.get(HMAC_ENV_VARS[1])
        if key_id and secret:
            from stream_plugin.storage.gcs_hmac import GcsHmacStore

            return GcsHmacStore(url, hmac_key_id=key_id, hmac_secret=secret, endpoint_url=endpoint_url)
    return GcsStore(
        url,
        project=project,
        credentials_file=credentials_file,
        anonymous=anonymous,
        endpoint_url=endpoint_url,
        requester_pays_project=requester_pays_project,
        environ=env,
    )


class GcsStore:
    """An ``ObjectStore`` over ``gs://bucket/prefix`` (GCS's JSON API); keys are relative to the prefix.

    Options: ``project``, ``credentials_file`` (a service-account JSON), ``anonymous`` (None: only for
    ``STORAGE_EMULATOR_HOST`` or when no credentials are found), ``endpoint_url`` (else
    ``STORAGE_EMULATOR_HOST``),
    ``requester_pays_project``. The client is built lazily in the process that uses it and rebuilt after
    a fork; the store pickles without it (for spawn-started workers).
    """

    def __init__(
        self,
        url: str,
        *,
        project: str | None = None,
        credentials_file: str | None = None,
        anonymous: bool | None = None,
        endpoint_url: str | None = None,
        requester_pays_project: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.url = url
        self.bucket_name, self.prefix = parse_gcs_url(url)
        emulator = env.get(EMULATOR_ENV_VAR)
        # As in Google's client: an emulator named by the environment gets anonymous requests; an
        # explicit endpoint (a private one, or an emulator) gets credentials unless anonymous=True.
        self.emulated = endpoint_url is None and bool(emulator)
        if endpoint_url is None and emulator:
            endpoint_url = emulator if "://" in emulator else f"http://{emulator}"
        self.endpoint_url = endpoint_url
        self.project = project
        self.credentials_file = credentials_file
        self.anonymous = anonymous
        self.requester_pays_project = requester_pays_project
        self._client = PerProcess(self._new_quiet_client)

    def __repr__(self) -> str:
        return f"GcsStore({redact_url(self.url)!r}, endpoint_url={redact_url(self.endpoint_url or '') or None!r})"

    # --- the client: one per process ---------------------------------------------------------------

    def client(self) -> storage.Client:
        """The ``google.cloud.storage.Client`` of this process."""
        return self._client.get()

    def _new_quiet_client(self) -> storage.Client:
        client = self._new_client()
        # google-cloud-storage 3 fetches bucket metadata for tracing in a background thread on first
        # use: an extra request per process that nobody here reads. Turn it off so that one call is one
        # request (exact retry and request counts).
        if getattr(client, "_bucket_metadata_cache", None) is not None:
            client._bucket_metadata_cache = None
        return client

    def _new_client(self) -> storage.Client:
        options = {"api_endpoint": self.endpoint_url} if self.endpoint_url else None
        if self.credentials_file is not None:
            return storage.Client.from_service_account_json(
                self.credentials_file, project=self.project, client_options=options
            )
        if self.anonymous or (self.anonymous is None and self.emulated):
            return storage.Client(
                project=self.project or "stream-plugin", credentials=AnonymousCredentials(), client_options=options
            )
        try:
            return storage.Client(project=self.project, client_options=options)
        except auth_exceptions.DefaultCredentialsError:
            if self.anonymous is False:
                raise StorageError(
                    f"Expected Google credentials for {self.url}, found none; set GOOGLE_APPLICATION_CREDENTIALS, "
                    f"run 'gcloud auth application-default login', or set GCS_KEY / GCS_SECRET (HMAC keys)."
                ) from None
            return storage.Client(
                project=self.project or "stream-plugin", credentials=AnonymousCredentials(), client_options=options
            )

    def bucket(self) -> storage.Bucket:
        return self.client().bucket(self.bucket_name, user_project=self.requester_pays_project)

    # --- error mapping -----------------------------------------------------------------------------

    def _describe(self, full_key: str) -> str:
        where = f" at endpoint {self.endpoint_url}" if self.endpoint_url else ""
        return f"gs://{self.bucket_name}/{full_key}{where}"

    @contextmanager
    def _mapped_errors(self, full_key: str, action: str) -> Iterator[None]:
        """Turn google-cloud-storage failures into the storage error classes."""
        where = self._describe(full_key)
        try:
            yield
        except api_exceptions.NotFound as error:
            raise RemoteNotFoundError(
                f"Expected {where} to exist to {action} it, found HTTP 404 ({error.message}); check the path "
                f"(bucket, prefix and key)."
            ) from error
        except (api_exceptions.Forbidden, api_exceptions.Unauthorized, auth_exceptions.RefreshError) as error:
            raise RemoteAccessDeniedError(
                f"Expected access to {action} {where}, found {type(error).__name__}: {error}; check the credentials "
                f"(GOOGLE_APPLICATION_CREDENTIALS, GCS_KEY / GCS_SECRET), the bucket's permissions and, for a "
                f"requester-pays bucket, requester_pays_project."
            ) from error
        except api_exceptions.TooManyRequests as error:
            wait = requested_wait(getattr(error.response, "headers", None))
            raise ThrottledError(
                f"Expected to {action} {where}, found HTTP 429 ({error.message}: the bucket's rate limit); "
                f"waiting, then trying again.",
                wait=wait,
            ) from error
        except api_exceptions.GoogleAPICallError as error:
            status = int(error.code or 0)
            if status >= 500 or status in TRANSIENT_STATUS:
                raise TransientStorageError(f"Expected to {action} {where}, found HTTP {status}; will retry.") from error
            raise StorageError(
                f"Expected to {action} {where}, found HTTP {status}: {error.message}; check the request."
            ) from error
        except (requests.exceptions.RequestException, auth_exceptions.TransportError, ConnectionError) as error:
            raise TransientStorageError(
                f"Expected to {action} {where}, found {type(error).__name__}: {error}; will retry. If it persists, "
                f"check the endpoint and network."
            ) from error
        except (DataCorruption, InvalidResponse) as error:
            # A checksum mismatch, or a response cut short: fetch again.
            raise TransientStorageError(f"Expected an intact response for {where}, found {error}; will retry.") from error

    # --- ObjectStore -------------------------------------------------------------------------------

    def full_key(self, key: str) -> str:
        """The object name for a store-relative ``key``."""
        return join_key(self.prefix, check_key(key, self.url))

    @staticmethod
    def _timeout(timeout: float | None) -> dict[str, Any]:
        return {} if timeout is None else {"timeout": timeout}

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        """Stream the object into ``dest``; the client checks the checksum, we check the length."""
        full_key = self.full_key(key)
        blob = self.bucket().blob(full_key)
        with self._mapped_errors(full_key, "download"):
            with open(dest, "wb") as handle:
                blob.download_to_file(handle, retry=None, **self._timeout(timeout))
            written = os.path.getsize(dest)
        check_complete(self._describe(full_key), blob.size, written)
        return written

    def upload(self, src: str | os.PathLike[str], key: str) -> None:
        """Upload ``src``; GCS exposes an object only once the upload is complete."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "upload"):
            self.bucket().blob(full_key).upload_from_filename(os.fspath(src), retry=None)

    def read_bytes(self, key: str, *, timeout: float | None = None) -> bytes:
        """The whole object in memory."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "read"):
            data: bytes = self.bucket().blob(full_key).download_as_bytes(retry=None, **self._timeout(timeout))
        return data

    def exists(self, key: str) -> bool:
        """Whether the object exists (404 → False; 403 and transient failures raise)."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "check"):
            return bool(self.bucket().blob(full_key).exists(retry=None))

    def delete(self, key: str) -> None:
        """Remove the object; a missing object is not an error (as on S3)."""
        full_key = self.full_key(key)
        try:
            with self._mapped_errors(full_key, "delete"):
                self.bucket().blob(full_key).delete(retry=None)
        except RemoteNotFoundError:
            pass

    def identity(self, key: str, *, timeout: float | None = None) -> str | None:
        """The object's generation: GCS gives every write of an object a new one."""
        return self.object_info(key, timeout=timeout).identity

    def object_info(self, key: str, *, timeout: float | None = None) -> ObjectInfo:
        """The object's size and generation (one metadata request)."""
        full_key = self.full_key(key)
        blob = self.bucket().blob(full_key)
        with self._mapped_errors(full_key, "check"):
            blob.reload(retry=None, **self._timeout(timeout))
        identity = None if blob.generation is None else f"generation={blob.generation}"
        return ObjectInfo(int(blob.size or 0), identity)

    def read_range(self, key: str, start: int, end: int, *, timeout: float | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object (one ranged GET); another length is transient."""
        if end <= start:
            return b""
        full_key = self.full_key(key)
        blob = self.bucket().blob(full_key)
        with self._mapped_errors(full_key, "read"):
            data: bytes = blob.download_as_bytes(
                start=start, end=end - 1, checksum=None, retry=None, **self._timeout(timeout)
            )
        check_complete(f"{self._describe(full_key)} [{start}, {end})", end - start, len(data))
        return data

    def read_range_and_info(
        self, key: str, start: int, end: int, *, timeout: float | None = None
    ) -> tuple[bytes, ObjectInfo]:
        """Bytes ``[start, end)`` and ``object_info``'s answer from the same GET: the size from its
        ``Content-Range`` total and the generation from ``x-goog-generation``, which the media download
        answers with. Where either is missing, the metadata request too.

        The client's download methods keep neither header (the blob learns the generation, not the
        size), so this GET goes through the client's own authorized session to the media URL
        ``download_as_bytes`` uses (requester-pays project included)."""
        assert start < end, "an empty range makes no request; the caller asks object_info instead"
        full_key = self.full_key(key)
        client = self.client()
        url = self.bucket().blob(full_key)._get_download_url(client)
        with self._mapped_errors(full_key, "read"):
            response = client._http.get(
                url, headers={"Range": f"bytes={start}-{end - 1}"}, **self._timeout(timeout)
            )
            if response.status_code >= 400:
                raise api_exceptions.from_http_response(response)
            data: bytes = response.content
        check_complete(f"{self._describe(full_key)} [{start}, {end})", end - start, len(data))
        total = answered_size(response.status_code, response.headers.get("Content-Range"), len(data))
        generation = response.headers.get("x-goog-generation")
        if total is None or generation is None:
            return data, self.object_info(key, timeout=timeout)
        return data, ObjectInfo(total, f"generation={generation}")

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix``, relative to the store root, sorted."""
        root = f"{self.prefix}/" if self.prefix else ""
        search = root + check_key(prefix, self.url)
        with self._mapped_errors(search, "list"):
            blobs = self.client().list_blobs(self.bucket(), prefix=search, retry=None)
            return sorted(blob.name[len(root) :] for blob in blobs)
