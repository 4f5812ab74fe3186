"""``S3Store``: Amazon S3 and S3-compatible stores (MinIO, Cloudflare R2, Ceph, moto) through boto3.

Credentials come from boto3's standard chain (env vars, profile, instance role). With none found the
store sends unsigned requests, which public buckets accept. ``endpoint_url`` (or ``S3_ENDPOINT_URL``
/ ``AWS_ENDPOINT_URL``) points it at another S3-compatible service.

botocore's own retries are disabled: ``call_with_retries`` owns retrying, so one call here is one
HTTP request (plus multipart parts for big uploads) and fault-injection tests can count exactly.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.exceptions
import botocore.retries.standard as botocore_standard
from boto3.exceptions import S3UploadFailedError
from botocore import UNSIGNED
from botocore.config import Config

from stream_plugin.errors import ConfigError, StorageError
from stream_plugin.gc_pause import collection_paused
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
from stream_plugin.storage.deadline import abort_response, attempt_deadline, deadline_error
from stream_plugin.storage.throttle_hints import requested_wait

ENDPOINT_ENV_VARS = ("S3_ENDPOINT_URL", "AWS_ENDPOINT_URL")
DEFAULT_REGION = "us-east-1"
# 1 MiB chunks: large enough that Python overhead per chunk is negligible (measured ~450 MB/s on
# loopback against moto, vs ~210 MB/s for boto3's managed download_file), small enough for memory.
DEFAULT_CHUNK_SIZE = 1 << 20

NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchBucket"})
DENIED_CODES = frozenset(
    {
        "403",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AllAccessDisabled",
        "ExpiredToken",
    }
)
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "InternalError",
        "ServiceUnavailable",
        "503",
        "500",
        "429",
    }
)
# The codes botocore's own retry modes treat as throttling (``SlowDown``, ``Throttling``,
# ``RequestLimitExceeded``, ...): its list where this botocore has it, else a copy of 1.40's.
THROTTLING_CODES = frozenset(
    getattr(
        botocore_standard.ThrottledRetryableChecker,
        "_THROTTLED_ERROR_CODES",
        (
            "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
            "TooManyRequestsException", "ProvisionedThroughputExceededException", "TransactionInProgressException",
            "RequestLimitExceeded", "BandwidthLimitExceeded", "LimitExceededException", "RequestThrottled",
            "SlowDown", "PriorRequestNotComplete", "EC2ThrottledException",
        ),
    )
)
# Connection resets, timeouts, truncated or corrupt bodies: worth another attempt.
TRANSIENT_BOTOCORE = (
    botocore.exceptions.ConnectionError,
    botocore.exceptions.HTTPClientError,
    botocore.exceptions.IncompleteReadError,
    botocore.exceptions.FlexibleChecksumError,
)


def parse_s3_url(url: str) -> tuple[str, str]:
    """Split ``s3://bucket/some/prefix`` into ``("bucket", "some/prefix")``."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ConfigError(
            f"Expected an S3 URL like 's3://bucket/prefix', found {url!r}; add the bucket name."
        )
    return parts.netloc, parts.path.strip("/")


def resolve_endpoint(endpoint_url: str | None, environ: Mapping[str, str]) -> str | None:
    """The endpoint to use: the explicit option, else ``S3_ENDPOINT_URL``, else ``AWS_ENDPOINT_URL``."""
    if endpoint_url:
        return endpoint_url
    for name in ENDPOINT_ENV_VARS:
        if environ.get(name):
            return environ[name]
    return None


# Our option name -> the name boto3 (and litdata, which hands storage_options to boto3) gives it.
BOTO3_NAMES: Mapping[str, str] = {
    "access_key_id": "aws_access_key_id",
    "secret_access_key": "aws_secret_access_key",
    "session_token": "aws_session_token",
    "region": "region_name",
}


def one_name(name: str, ours: str | None, boto3_form: str | None) -> str | None:
    """An option given under our name or boto3's (``BOTO3_NAMES``); both at once is refused."""
    if ours is not None and boto3_form is not None:
        raise ConfigError(
            f"storage_options: expected {name!r} or {BOTO3_NAMES[name]!r}, found both; they name the same "
            f"setting, so pass one of them."
        )
    return ours if ours is not None else boto3_form


def head_identity(head: Mapping[str, Any]) -> str | None:
    """The identity of an object from a HEAD (or GET) answer: ETag, last-modified time and version id."""
    etag, modified, version = head.get("ETag"), head.get("LastModified"), head.get("VersionId")
    if etag is None and modified is None and version is None:
        return None
    stamp = modified.isoformat() if modified is not None else None
    return f"etag={etag} modified={stamp} version={version}"


class S3Store:
    """An ``ObjectStore`` over ``s3://bucket/prefix``; keys are relative to the prefix.

    Options: ``endpoint_url`` (else ``S3_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL``), ``region`` (else
    ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` / profile / us-east-1), ``profile``, ``unsigned`` (None =
    unsigned only when no credentials are found), ``addressing_style`` (default ``path`` for custom
    endpoints, which MinIO and IP endpoints need), ``max_pool_connections``, ``chunk_size``;
    ``access_key_id`` / ``secret_access_key`` / ``session_token`` (else boto3's chain), so that two
    streams can read from two accounts. boto3's and litdata's names work too (``BOTO3_NAMES``):
    ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``, ``region_name``.

    boto3 clients are not fork-safe, so they are built lazily in the process that uses them and rebuilt
    after a fork; the store itself pickles without them (for spawn-started workers).
    """

    def __init__(
        self,
        url: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        unsigned: bool | None = None,
        addressing_style: str | None = None,
        max_pool_connections: int = 16,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        region_name: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        redact_loggers(REDACTED_LIBRARY_LOGGERS)  # the SDK's request log (see stream_plugin.redaction)
        env = os.environ if environ is None else environ
        access_key_id = one_name("access_key_id", access_key_id, aws_access_key_id)
        secret_access_key = one_name("secret_access_key", secret_access_key, aws_secret_access_key)
        session_token = one_name("session_token", session_token, aws_session_token)
        region = one_name("region", region, region_name)
        if (access_key_id is None) != (secret_access_key is None):
            raise ConfigError(
                "Expected access_key_id and secret_access_key together, found only one; pass both, or "
                "neither to use boto3's credential chain."
            )
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.session_token = session_token
        self.url = url
        self.bucket, self.prefix = parse_s3_url(url)
        self.endpoint_url = resolve_endpoint(endpoint_url, env)
        self.region = region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        self.profile = profile
        self.unsigned = unsigned
        if addressing_style not in (None, "auto", "path", "virtual"):
            raise ConfigError(
                f"Expected addressing_style 'auto', 'path' or 'virtual', found {addressing_style!r}; "
                f"use 'path' for MinIO and IP endpoints."
            )
        self.addressing_style = addressing_style or ("path" if self.endpoint_url else "auto")
        if chunk_size < 1:
            raise ConfigError(
                f"Expected chunk_size >= 1 byte, found {chunk_size}; the default is {DEFAULT_CHUNK_SIZE}."
            )
        self.max_pool_connections = max_pool_connections
        self.chunk_size = chunk_size
        self._reset_clients()

    def __repr__(self) -> str:
        return f"S3Store({redact_url(self.url)!r}, endpoint_url={redact_url(self.endpoint_url or '') or None!r})"

    # --- clients: one per (process, timeout) -------------------------------------------------------

    def _reset_clients(self) -> None:
        # A fresh lock too: a lock held by another thread at fork time stays locked in the child.
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._clients: dict[float | None, Any] = {}
        self._unsigned_resolved: bool | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_pid", "_lock", "_clients", "_unsigned_resolved"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_clients()

    def client(self, timeout: float | None = None) -> Any:
        """The boto3 S3 client for this process whose connect/read timeout is ``timeout`` seconds."""
        if self._pid != os.getpid():
            self._reset_clients()
        client = self._clients.get(timeout)
        if client is None:
            with self._lock:
                client = self._clients.get(timeout)
                if client is None:
                    client = self._clients[timeout] = self._make_client(timeout)
        return client

    def _make_client(self, timeout: float | None) -> Any:
        with collection_paused():
            return self._new_client(timeout)

    def _new_client(self, timeout: float | None) -> Any:
        # A Session per client: sessions are not thread-safe, and this runs once per timeout value.
        session = boto3.session.Session(
            profile_name=self.profile,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            aws_session_token=self.session_token,
        )
        if self._unsigned_resolved is None:
            self._unsigned_resolved = (
                self.unsigned if self.unsigned is not None else session.get_credentials() is None
            )
        config_options: dict[str, Any] = {
            "retries": {"total_max_attempts": 1, "mode": "standard"},
            "max_pool_connections": self.max_pool_connections,
            "s3": {"addressing_style": self.addressing_style},
        }
        if timeout is not None:
            config_options.update(connect_timeout=timeout, read_timeout=timeout)
        if self._unsigned_resolved:
            config_options["signature_version"] = UNSIGNED
        if self.endpoint_url:
            # Many S3-compatible services reject the streaming checksum trailers boto3 adds by default.
            config_options["request_checksum_calculation"] = "when_required"
        return session.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region or session.region_name or DEFAULT_REGION,
            config=Config(**config_options),
        )

    @property
    def is_unsigned(self) -> bool:
        """Whether requests go out unsigned (resolved when the first client is built)."""
        self.client()
        assert self._unsigned_resolved is not None
        return self._unsigned_resolved

    # --- error mapping -----------------------------------------------------------------------------

    def _describe(self, full_key: str) -> str:
        where = f" at endpoint {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{full_key}{where}"

    @contextmanager
    def _mapped_errors(self, full_key: str, action: str) -> Iterator[None]:
        """Turn boto3 failures into the storage error classes, naming the URL and what to check."""
        try:
            yield
        except S3UploadFailedError as error:
            cause = error.__context__
            if isinstance(cause, botocore.exceptions.ClientError):
                raise self._client_error(cause, full_key, action) from error
            raise StorageError(f"Expected to {action} {self._describe(full_key)}, found {error}.") from error
        except botocore.exceptions.ClientError as error:
            raise self._client_error(error, full_key, action) from error
        except TRANSIENT_BOTOCORE as error:
            raise TransientStorageError(
                f"Expected to {action} {self._describe(full_key)}, found {type(error).__name__}: {error}; "
                f"will retry. If it persists, check the endpoint and network."
            ) from error
        except botocore.exceptions.BotoCoreError as error:
            raise StorageError(
                f"Expected to {action} {self._describe(full_key)}, found {type(error).__name__}: {error}; "
                f"check the credentials, region and endpoint."
            ) from error

    def _client_error(
        self, error: botocore.exceptions.ClientError, full_key: str, action: str
    ) -> StorageError:
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        found = f"{code or 'an error'} (HTTP {status})"
        where = self._describe(full_key)
        if code in NOT_FOUND_CODES or status == 404:
            return RemoteNotFoundError(
                f"Expected {where} to exist to {action} it, found {found}; check the path (bucket, prefix and key)."
            )
        if code in DENIED_CODES or status == 403:
            return RemoteAccessDeniedError(
                f"Expected access to {action} {where}, found {found}; check the credentials (AWS_ACCESS_KEY_ID / "
                f"AWS_PROFILE), the endpoint and the bucket policy. S3 also answers 403 for a missing key when "
                f"ListBucket is not allowed, so check the path too."
            )
        wait = requested_wait(error.response.get("ResponseMetadata", {}).get("HTTPHeaders"))
        if code in THROTTLING_CODES or status == 429 or (status == 503 and wait is not None):
            return ThrottledError(
                f"Expected to {action} {where}, found {found} (the store's rate limit); waiting, then trying again.",
                wait=wait,
            )
        if code in TRANSIENT_CODES or status >= 500 or status == 429:
            return TransientStorageError(f"Expected to {action} {where}, found {found}; will retry.")
        return StorageError(
            f"Expected to {action} {where}, found {found}: {error}; check the request (path, region, endpoint)."
        )

    # --- ObjectStore -------------------------------------------------------------------------------

    def full_key(self, key: str) -> str:
        """The bucket key for a store-relative ``key``."""
        return join_key(self.prefix, check_key(key, self.url))

    def download(self, key: str, dest: str | os.PathLike[str], *, timeout: float | None = None) -> int:
        """Stream the object into ``dest`` in ``chunk_size`` pieces; verify the length against the header.

        ``timeout`` bounds each socket read and, through ``attempt_deadline``, the whole attempt.
        """
        full_key = self.full_key(key)
        started = time.monotonic()
        written = 0
        with self._mapped_errors(full_key, "download"):
            response = self.client(timeout).get_object(Bucket=self.bucket, Key=full_key)
            expected = int(response["ContentLength"])
            body = response["Body"]
            remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            raw = getattr(body, "_raw_stream", body)
            with attempt_deadline(remaining, lambda: abort_response(raw)) as expired:
                try:
                    with open(dest, "wb") as handle:
                        for chunk in body.iter_chunks(self.chunk_size):
                            handle.write(chunk)
                            written += len(chunk)
                except Exception as error:
                    if expired():
                        raise deadline_error(self._describe(full_key), timeout or 0.0, written) from error
                    raise
                finally:
                    body.close()
            if expired() and written != expected:
                raise deadline_error(self._describe(full_key), timeout or 0.0, written)
        check_complete(self._describe(full_key), expected, written)
        return written

    def upload(self, src: str | os.PathLike[str], key: str) -> None:
        """Upload ``src`` (multipart above 8 MiB); S3 exposes an object only once it is complete."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "upload"):
            self.client().upload_file(os.fspath(src), self.bucket, full_key)

    def read_bytes(self, key: str, *, timeout: float | None = None) -> bytes:
        """The whole object in memory."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "read"):
            response = self.client(timeout).get_object(Bucket=self.bucket, Key=full_key)
            expected = int(response["ContentLength"])
            data: bytes = response["Body"].read()
        check_complete(self._describe(full_key), expected, len(data))
        return data

    def exists(self, key: str) -> bool:
        """HEAD the object: 404 → False; 403 and transient failures raise."""
        full_key = self.full_key(key)
        try:
            with self._mapped_errors(full_key, "check"):
                self.client().head_object(Bucket=self.bucket, Key=full_key)
        except RemoteNotFoundError:
            return False
        return True

    def identity(self, key: str, *, timeout: float | None = None) -> str | None:
        """ETag and last-modified time of the object (HEAD): they change whenever it is rewritten."""
        return self.object_info(key, timeout=timeout).identity

    def object_info(self, key: str, *, timeout: float | None = None) -> ObjectInfo:
        """The object's size and ``identity`` from one HEAD."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "check"):
            head = self.client(timeout).head_object(Bucket=self.bucket, Key=full_key)
        return ObjectInfo(int(head["ContentLength"]), head_identity(head))

    def read_range(self, key: str, start: int, end: int, *, timeout: float | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object (one GET with ``Range``); another length is transient."""
        if end <= start:
            return b""
        return self._get_range(key, start, end, timeout)[0]

    def read_range_and_info(
        self, key: str, start: int, end: int, *, timeout: float | None = None
    ) -> tuple[bytes, ObjectInfo]:
        """Bytes ``[start, end)`` and ``object_info``'s answer from the same GET (its ``Content-Range``
        total and the ETag, last-modified time and version id a HEAD gives): no HEAD of its own."""
        assert start < end, "an empty range makes no request; the caller asks object_info instead"
        data, response = self._get_range(key, start, end, timeout)
        total = range_total(response.get("ContentRange"))
        if total is None:
            return data, self.object_info(key, timeout=timeout)  # no object size in the answer: ask for it
        return data, ObjectInfo(total, head_identity(response))

    def _get_range(self, key: str, start: int, end: int, timeout: float | None) -> tuple[bytes, Mapping[str, Any]]:
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "read"):
            response = self.client(timeout).get_object(
                Bucket=self.bucket, Key=full_key, Range=f"bytes={start}-{end - 1}"
            )
            data: bytes = response["Body"].read()
        check_complete(f"{self._describe(full_key)} [{start}, {end})", end - start, len(data))
        return data, response

    def delete(self, key: str) -> None:
        """Remove the object; a missing object is not an error (S3 semantics)."""
        full_key = self.full_key(key)
        with self._mapped_errors(full_key, "delete"):
            self.client().delete_object(Bucket=self.bucket, Key=full_key)

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix``, relative to the store root, sorted."""
        root = f"{self.prefix}/" if self.prefix else ""
        search = root + check_key(prefix, self.url)
        keys: list[str] = []
        with self._mapped_errors(search, "list"):
            pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=search)
            for page in pages:
                keys.extend(item["Key"][len(root) :] for item in page.get("Contents", ()))
        return sorted(keys)
