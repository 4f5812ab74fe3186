"""``AzureStore``: Azure Blob Storage (``azure://container/prefix``, MosaicML's form, and ``az://``).

The storage account and its credentials, in order: a ``connection_string`` option, else
``AZURE_STORAGE_CONNECTION_STRING`` (the SDK's variable; Azurite's connection string works too); else
the account name (``account_name`` option, else MosaicML's ``AZURE_ACCOUNT_NAME``) with, as the
credential, an ``account_key`` (else MosaicML's ``AZURE_ACCOUNT_ACCESS_KEY``), a ``sas_token`` (or the
URL's query: ``azure://container/prefix?sv=...&sig=...``), a
``credential`` object, or ``DefaultAzureCredential`` when ``azure-identity`` is installed; with none of
those, anonymous requests (public containers). ``endpoint_url`` replaces
``https://<account>.blob.core.windows.net`` (an emulator, a sovereign cloud).

The SDK's own retries are off (``retry_total=0``): ``call_with_retries`` owns retrying. One exception:
the SDK re-reads a body cut short in the middle of a download by itself (up to 3 times).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    IncompleteReadError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobProperties, BlobServiceClient, ContainerClient

from stream_plugin.errors import ConfigError, StorageError
from stream_plugin.redaction import REDACTED_LIBRARY_LOGGERS, redact_loggers, redact_url
from stream_plugin.storage.base import (
    ObjectInfo,
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    ThrottledError,
    TransientStorageError,
    check_complete,
    check_key,
    join_key,
    range_total,
)
from stream_plugin.storage.per_process import PerProcess
from stream_plugin.storage.throttle_hints import requested_wait

SCHEMES = ("azure", "az")
CONNECTION_STRING_ENV_VAR = "AZURE_STORAGE_CONNECTION_STRING"
ACCOUNT_ENV_VAR = "AZURE_ACCOUNT_NAME"
KEY_ENV_VAR = "AZURE_ACCOUNT_ACCESS_KEY"
TRANSIENT_STATUS = frozenset({408, 429})


def parse_azure_url(url: str) -> tuple[str, str]:
    """Split ``azure://container/some/prefix`` into ``("container", "some/prefix")``."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.netloc:
        raise ConfigError(
            f"Expected an Azure URL like 'azure://container/prefix' or 'az://container/prefix', found {url!r}; "
            f"add the container name."
        )
    return parts.netloc, parts.path.strip("/")


def sas_token_of(url: str, sas_token: str | None) -> str | None:
    """The SAS token: the ``sas_token`` option, else the URL's query (``azure://c/p?sv=...&sig=...``,
    as an Azure SAS URL carries it)."""
    query = urlsplit(url).query
    if query and sas_token is not None and query != sas_token.lstrip("?"):
        raise ConfigError(
            f"Expected one SAS token for {redact_url(url)!r}, found one in the URL's query and another in "
            f"storage_options['sas_token']; pass it in one place."
        )
    return sas_token if sas_token is not None else (query or None)


def blob_info(properties: BlobProperties, size: int | None = None) -> ObjectInfo:
    """A blob's size (``size``, else the properties') and identity (its ETag and last-modified time)
    from its properties, which a properties request and a ranged GET both give."""
    etag, modified = properties.etag, properties.last_modified
    identity = None
    if etag is not None or modified is not None:
        identity = f"etag={etag} modified={modified.isoformat() if modified is not None else None}"
    return ObjectInfo(int(properties.size) if size is None else size, identity)


def _code(error: HttpResponseError) -> str | None:
    """The storage service's error code (``BlobNotFound``, ``AuthenticationFailed``, ...) when it sent one."""
    code = getattr(error, "error_code", None)  # set by azure-storage-blob, not declared by azure-core
    return None if code is None else str(code)


class AzureStore:
    """An ``ObjectStore`` over ``azure://container/prefix``; keys are relative to the prefix.

    Options: ``connection_string``, ``account_name``, ``account_key``, ``sas_token``, ``credential``
    (any azure-identity credential), ``endpoint_url`` (the account's blob endpoint). Clients are built
    lazily in the process that uses them and rebuilt after a fork; the store pickles without them.
    """

    def __init__(
        self,
        url: str,
        *,
        connection_string: str | None = None,
        account_name: str | None = None,
        account_key: str | None = None,
        sas_token: str | None = None,
        credential: Any = None,
        endpoint_url: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        redact_loggers(REDACTED_LIBRARY_LOGGERS)  # the SDK's request log (see stream_plugin.redaction)
        env = os.environ if environ is None else environ
        self.url = url
        self.container, self.prefix = parse_azure_url(url)
        self.connection_string = connection_string or (
            None if account_name else env.get(CONNECTION_STRING_ENV_VAR) or None
        )
        self.account_name = account_name or env.get(ACCOUNT_ENV_VAR) or None
        if self.connection_string is None and self.account_name is None:
            raise ConfigError(
                f"Expected an Azure storage account for {url!r}, found none; set AZURE_ACCOUNT_NAME (with "
                f"AZURE_ACCOUNT_ACCESS_KEY) or AZURE_STORAGE_CONNECTION_STRING, or pass "
                f"storage_options={{'account_name': ...}} or {{'connection_string': ...}}."
            )
        self.account_key = account_key or env.get(KEY_ENV_VAR) or None
        self.sas_token = sas_token_of(url, sas_token)
        self.credential = credential
        self.endpoint_url = endpoint_url
        self._client = PerProcess(self._new_container_client)

    def __repr__(self) -> str:
        return f"AzureStore({redact_url(self.url)!r}, account={self.account_name!r})"

    # --- the client: one per process ---------------------------------------------------------------

    def client(self) -> ContainerClient:
        """The ``ContainerClient`` of this process."""
        return self._client.get()

    def _new_container_client(self) -> ContainerClient:
        return self._new_service().get_container_client(self.container)

    def _new_service(self) -> BlobServiceClient:
        options: dict[str, Any] = {"retry_total": 0}
        if self.connection_string is not None:
            return BlobServiceClient.from_connection_string(self.connection_string, **options)
        account_url = self.endpoint_url or f"https://{self.account_name}.blob.core.windows.net"
        return BlobServiceClient(account_url, credential=self._credential(), **options)

    def _credential(self) -> Any:
        if self.account_key is not None:
            return {"account_name": self.account_name, "account_key": self.account_key}
        if self.sas_token is not None:
            return self.sas_token
        if self.credential is not None:
            return self.credential
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError:
            return None  # anonymous: public containers only
        return DefaultAzureCredential()

    # --- error mapping -----------------------------------------------------------------------------

    def _describe(self, full_key: str) -> str:
        account = self.account_name or "the connection string's account"
        return f"azure://{self.container}/{full_key} (account {account})"

    @contextmanager
    def _mapped_errors(self, full_key: str, action: str) -> Iterator[None]:
        """Turn azure-core failures into the storage error classes, naming the URL and what to check."""
        where = self._describe(full_key)
        try:
            yield
        except ResourceNotFoundError as error:
            raise RemoteNotFoundError(
                f"Expected {where} to exist to {action} it, found {_code(error) or 'HTTP 404'}; check the path "
                f"(container, prefix and key)."
            ) from error
        except ClientAuthenticationError as error:
            raise self._denied(where, action, error) from error
        except HttpResponseError as error:
            status = int(error.status_code or 0)
            if status in (401, 403):
                raise self._denied(where, action, error) from error
            wait = requested_wait(getattr(error.response, "headers", None))
            if status == 429 or (status == 503 and (getattr(error, "error_code", None) == "ServerBusy" or wait is not None)):
                raise ThrottledError(
                    f"Expected to {action} {where}, found {_code(error) or 'throttling'} (HTTP {status}: the "
                    f"account's rate limit); waiting, then trying again.",
                    wait=wait,
                ) from error
            if status >= 500 or status in TRANSIENT_STATUS or isinstance(error, IncompleteReadError):
                raise TransientStorageError(
                    f"Expected to {action} {where}, found {_code(error) or type(error).__name__} (HTTP {status}); "
                    f"will retry."
                ) from error
            raise StorageError(
                f"Expected to {action} {where}, found HTTP {status} {_code(error)}: {error.message}; check the "
                f"request."
            ) from error
        except (ServiceRequestError, ServiceResponseError, ConnectionError, TimeoutError) as error:
            raise TransientStorageError(
                f"Expected to {action} {where}, found {type(error).__name__}: {error}; will retry. If it persists, "
                f"check the endpoint and network."
            ) from error
        except AzureError as error:
            raise StorageError(f"Expected to {action} {where}, found {type(error).__name__}: {error}.") from error

    def _denied(self, where: str, action: str, error: AzureError) -> RemoteAccessDeniedError:
        return RemoteAccessDeniedError(
            f"Expected access to {action} {where}, found {type(error).__name__}: {error}; check the credentials "
            f"(AZURE_ACCOUNT_ACCESS_KEY, AZURE_STORAGE_CONNECTION_STRING, a SAS token or azure-identity login) and "
            f"the container's permissions."
        )

    # --- ObjectStore -------------------------------------------------------------------------------

    def full_key(self, key: str) -> str:
        """The blob name for a store-relative ``key``."""
        return join_key(self.prefix, check_key(key, self.url))

    @staticmethod
    def _timeouts(timeout: float | None) -> dict[str, Any]:
        return {} if timeout is None else {"connection_timeout": timeout, "read_timeout": timeout}

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        """Stream the blob into ``dest``; a body shorter than the blob's size is transient."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "download"):
            stream = self.client().download_blob(full_key, max_concurrency=1, **self._timeouts(timeout))
            expected = int(stream.size)
            with open(dest, "wb") as handle:
                written = int(stream.readinto(handle))
        check_complete(self._describe(full_key), expected, written)
        return written

    def upload(self, src: str | os.PathLike[str], key: str) -> None:
        """Upload ``src`` as a block blob; Azure exposes it only once committed whole."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "upload"), open(src, "rb") as handle:
            self.client().upload_blob(full_key, handle, overwrite=True, max_concurrency=1)

    def read_bytes(self, key: str, *, timeout: float | None = None) -> bytes:
        """The whole blob in memory."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "read"):
            stream = self.client().download_blob(full_key, max_concurrency=1, **self._timeouts(timeout))
            data: bytes = stream.readall()
            expected = int(stream.size)
        check_complete(self._describe(full_key), expected, len(data))
        return data

    def exists(self, key: str) -> bool:
        """Whether the blob exists (404 → False; 403 and transient failures raise)."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "check"):
            return bool(self.client().get_blob_client(full_key).exists())

    def delete(self, key: str) -> None:
        """Remove the blob; a missing blob is not an error (as on S3)."""
        full_key = self.full_key(key)
        try:
            with self._mapped_errors(full_key, "delete"):
                self.client().get_blob_client(full_key).delete_blob()
        except RemoteNotFoundError:
            pass

    def identity(self, key: str, *, timeout: float | None = None) -> str | None:
        """ETag and last-modified time of the blob: they change whenever it is rewritten."""
        return self.object_info(key, timeout=timeout).identity

    def object_info(self, key: str, *, timeout: float | None = None) -> ObjectInfo:
        """The blob's size and ``identity`` (one properties request)."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "check"):
            properties = self.client().get_blob_client(full_key).get_blob_properties(**self._timeouts(timeout))
        return blob_info(properties)

    def read_range(self, key: str, start: int, end: int, *, timeout: float | None = None) -> bytes:
        """Bytes ``[start, end)`` of the blob (one ranged GET); another length is transient."""
        if end <= start:
            return b""
        return self._get_range(key, start, end, timeout)[0]

    def read_range_and_info(
        self, key: str, start: int, end: int, *, timeout: float | None = None
    ) -> tuple[bytes, ObjectInfo]:
        """Bytes ``[start, end)`` and ``object_info``'s answer from the same GET: the SDK reads the blob's
        size from its ``Content-Range`` and the ETag and last-modified time from its headers, as the
        properties request gives them. No properties request of its own."""
        assert start < end, "an empty range makes no request; the caller asks object_info instead"
        data, properties = self._get_range(key, start, end, timeout)
        # The SDK sets properties.size to the range's length, and content_range to "bytes S-E/TOTAL".
        total = range_total(properties.content_range)
        if total is None:
            return data, self.object_info(key, timeout=timeout)
        return data, blob_info(properties, total)

    def _get_range(self, key: str, start: int, end: int, timeout: float | None) -> tuple[bytes, BlobProperties]:
        # One GET: a range up to the SDK's max_single_get_size (32 MiB, READ_LIMIT_BYTES's size) is read whole.
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "read"):
            stream = self.client().download_blob(
                full_key, offset=start, length=end - start, max_concurrency=1, **self._timeouts(timeout)
            )
            data: bytes = stream.readall()
        check_complete(f"{self._describe(full_key)} [{start}, {end})", end - start, len(data))
        return data, stream.properties

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix``, relative to the store root, sorted."""
        root = f"{self.prefix}/" if self.prefix else ""
        search = root + check_key(prefix, self.url)
        with self._mapped_errors(search, "list"):
            return sorted(name[len(root) :] for name in self.client().list_blob_names(name_starts_with=search))
