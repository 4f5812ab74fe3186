"""Secrets for S3 (moto), GCS's HMAC keys (its S3-compatible API, on moto) and Azure Blob (Azurite), in
every place a user puts them: ``storage_options`` (our names and boto3's), the environment, a
connection string, a SAS token in the URL. A read with DEBUG logging on, and every error path
(unreachable, denied, missing index, truncated body, a remote changed under a warm cache): the secret
appears in no exception chain, log record, output, ``repr()``, resume state or file under ``local``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.azure_sas import container_sas, signature_forms, with_wrong_signature
from support.azure_server import ACCOUNT, KEY, AzureContainer
from support.datasets import write_ids
from support.fault_proxy import FaultProxy, FaultRule
from support.s3_server import S3Bucket, S3Keys
from support.secret_checks import (
    as_in_a_fresh_process,
    assert_no_secrets,
    chain_text,
    closed_port,
    dataset_texts,
    read_ids,
    seen_by_anyone,
)

from stream_plugin.errors import RemoteChangedError, StorageError
from stream_plugin.storage import RemoteAccessDeniedError, RemoteNotFoundError

SAMPLES = 60
WRONG_KEY = KEY[:-8] + "AAAAAAA="  # Azurite's key with a wrong tail


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> pytest.LogCaptureFixture:
    """Every record of every logger (ours, botocore's, urllib3's, the Azure SDK's) at DEBUG and above."""
    as_in_a_fresh_process(monkeypatch)
    caplog.set_level(logging.DEBUG)
    return caplog


@pytest.fixture
def dataset_folder(tmp_path: Path) -> Path:
    return write_ids(tmp_path / "source", range(SAMPLES), size_limit=1 << 11)


# --- where the secret is put ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    """How one test reaches the dataset: the remote, its storage_options, the environment it needs."""

    remote: str
    options: dict[str, Any]
    environment: dict[str, str | None] = field(default_factory=dict)  # None: the variable is unset


@dataclass(frozen=True)
class Place:
    """One place a user puts a secret, for one store.

    ``access(target, endpoint, prefix, right)`` builds the remote for ``prefix`` served at ``endpoint``
    (``host:port``: the server, a proxy or a closed port) with the right secret or a wrong one. The
    target is the ``AzureContainer``, or an ``S3Reader``: moto enforces auth throughout these tests, so
    only its IAM's keys, with the right secret (and session token), read anything.
    """

    name: str
    store: str  # "s3" (moto) or "azure" (Azurite)
    access: Callable[[Any, str, str, bool], Access]
    secrets: tuple[str, ...]

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class S3Reader:
    """A bucket on moto and keys its IAM knows (GCS's HMAC places use the user's key as theirs)."""

    bucket: S3Bucket
    keys: S3Keys

    def key(self, *, session: bool, right: bool) -> tuple[str, str, str | None]:
        """(key id, secret, session token): the user's key or the session's, its secret wrong unless
        ``right`` (moto then answers 403 SignatureDoesNotMatch)."""
        keys = self.keys
        found = (keys.session_key_id, keys.session_secret, keys.session_token) if session else (
            keys.key_id, keys.secret, None
        )
        return found if right else (found[0], wrong(found[1]), found[2])


def wrong(secret: str) -> str:
    """The secret with a wrong tail, as long as the right one."""
    return secret[:-6] + ("WRONG6" if secret[-6:] != "WRONG6" else "wrong6")


def s3_options_boto3_names(
    reader: S3Reader, endpoint: str, prefix: str, right: bool, *, session: bool = False
) -> Access:
    key_id, secret, token = reader.key(session=session, right=right)
    options = {
        "endpoint_url": f"http://{endpoint}",
        "aws_access_key_id": key_id,
        "aws_secret_access_key": secret,
        "region_name": "us-east-1",
    }
    if token is not None:
        options["aws_session_token"] = token
    return Access(reader.bucket.url(prefix), options)


def s3_options_our_names(reader: S3Reader, endpoint: str, prefix: str, right: bool) -> Access:
    key_id, secret, _ = reader.key(session=False, right=right)
    options = {"endpoint_url": f"http://{endpoint}", "access_key_id": key_id, "secret_access_key": secret}
    return Access(reader.bucket.url(prefix), options)


def s3_environment(
    reader: S3Reader, endpoint: str, prefix: str, right: bool, *, session: bool = False
) -> Access:
    key_id, secret, token = reader.key(session=session, right=right)
    environment = {
        "AWS_ACCESS_KEY_ID": key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_SESSION_TOKEN": token,  # None unsets the token s3_bucket's test credentials hold
        "S3_ENDPOINT_URL": f"http://{endpoint}",
    }
    return Access(reader.bucket.url(prefix), {}, environment)


def s3_session_token_option(reader: S3Reader, endpoint: str, prefix: str, right: bool) -> Access:
    return s3_options_boto3_names(reader, endpoint, prefix, right, session=True)


def s3_session_token_environment(reader: S3Reader, endpoint: str, prefix: str, right: bool) -> Access:
    return s3_environment(reader, endpoint, prefix, right, session=True)


def gcs_hmac_options(reader: S3Reader, endpoint: str, prefix: str, right: bool) -> Access:
    key_id, secret, _ = reader.key(session=False, right=right)
    options = {"endpoint_url": f"http://{endpoint}", "hmac_key_id": key_id, "hmac_secret": secret}
    return Access(f"gs://{reader.bucket.name}/{prefix}", options)


def gcs_hmac_environment(reader: S3Reader, endpoint: str, prefix: str, right: bool) -> Access:
    key_id, secret, _ = reader.key(session=False, right=right)
    environment: dict[str, str | None] = {"GCS_KEY": key_id, "GCS_SECRET": secret}
    return Access(f"gs://{reader.bucket.name}/{prefix}", {"endpoint_url": f"http://{endpoint}"}, environment)


def azure_sas_in_url(container: AzureContainer, endpoint: str, prefix: str, right: bool) -> Access:
    sas = container_sas(container)
    sas = sas if right else with_wrong_signature(sas)
    options = {"account_name": ACCOUNT, "endpoint_url": f"http://{endpoint}/{ACCOUNT}"}
    return Access(f"{container.url(prefix)}?{sas}", options)


def azure_account_key_option(container: AzureContainer, endpoint: str, prefix: str, right: bool) -> Access:
    options = {
        "account_name": ACCOUNT,
        "account_key": KEY if right else WRONG_KEY,
        "endpoint_url": f"http://{endpoint}/{ACCOUNT}",
    }
    return Access(container.url(prefix), options)


def azure_connection_string_option(
    container: AzureContainer, endpoint: str, prefix: str, right: bool
) -> Access:
    connection = container.server.connection_string(f"http://{endpoint}/{ACCOUNT}")
    return Access(
        container.url(prefix),
        {"connection_string": connection if right else connection.replace(KEY, WRONG_KEY)},
    )


def azure_environment(container: AzureContainer, endpoint: str, prefix: str, right: bool) -> Access:
    environment = {"AZURE_ACCOUNT_NAME": ACCOUNT, "AZURE_ACCOUNT_ACCESS_KEY": KEY if right else WRONG_KEY}
    return Access(container.url(prefix), {"endpoint_url": f"http://{endpoint}/{ACCOUNT}"}, environment)


# Azure's keys are base64: the part before the "/" is checked too, in case a message cuts the key there.
AZURE_KEYS = (KEY, WRONG_KEY, KEY[:24], WRONG_KEY[-24:])
# The S3 places' secrets come from moto's IAM (see Rig.secrets); these name which ones each place holds.
USER_SECRET, SESSION_SECRETS = ("secret",), ("session_secret", "session_token")
PLACES = (
    Place("s3-options-boto3-names", "s3", s3_options_boto3_names, USER_SECRET),
    Place("s3-options-our-names", "s3", s3_options_our_names, USER_SECRET),
    Place("s3-environment", "s3", s3_environment, USER_SECRET),
    Place("s3-session-token-option", "s3", s3_session_token_option, SESSION_SECRETS),
    Place("s3-session-token-environment", "s3", s3_session_token_environment, SESSION_SECRETS),
    Place("gcs-hmac-options", "s3", gcs_hmac_options, USER_SECRET),
    Place("gcs-hmac-environment", "s3", gcs_hmac_environment, USER_SECRET),
    Place("azure-sas-in-url", "azure", azure_sas_in_url, ()),  # the secrets are the signatures: see Rig
    Place("azure-account-key-option", "azure", azure_account_key_option, AZURE_KEYS),
    Place("azure-connection-string-option", "azure", azure_connection_string_option, AZURE_KEYS),
    Place("azure-environment", "azure", azure_environment, AZURE_KEYS),
)
S3_PLACES = tuple(place for place in PLACES if place.store == "s3")


@dataclass
class Rig:
    """A place with its server: the dataset published under ``ds/``, and how to reach, deny or rewrite it."""

    place: Place
    server: Any  # the S3Bucket or the AzureContainer
    host: str
    port: int
    monkeypatch: pytest.MonkeyPatch
    keys: S3Keys | None = None  # an S3 place's: moto's IAM knows them

    def access(self, *, endpoint: str | None = None, prefix: str = "ds", right: bool = True) -> Access:
        target = self.server if self.keys is None else S3Reader(self.server, self.keys)
        found = self.place.access(target, endpoint or f"{self.host}:{self.port}", prefix, right)
        for name, value in found.environment.items():
            if value is None:
                self.monkeypatch.delenv(name, raising=False)
            else:
                self.monkeypatch.setenv(name, value)
        return found

    @property
    def secrets(self) -> tuple[str, ...]:
        if self.keys is not None:
            values = [getattr(self.keys, name) for name in self.place.secrets]
            return (*values, *map(wrong, values))
        if self.place.name != "azure-sas-in-url":
            return self.place.secrets
        right = container_sas(self.server)  # the same token as the one handed out (a fixed expiry)
        return (*signature_forms(right), *signature_forms(with_wrong_signature(right)))

    def rewrite_index(self) -> None:
        """The index rewritten under the same name, as a writer re-publishing the dataset does."""
        with self.enforced(False):
            self.server.put("ds/index.json", self.server.get("ds/index.json") + b"\n")

    def enforced(self, enforce: bool = True) -> AbstractContextManager[None]:
        """Inside, moto refuses (or, with ``enforce=False``, accepts) any key its IAM does not know;
        Azurite always checks."""
        return nullcontext() if self.keys is None else self.server.server.enforce_auth(enforce)


def s3_rig(place: Place, bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch, host: str, port: int) -> Rig:
    """An S3 place's rig: keys made in moto's IAM (before auth is enforced)."""
    return Rig(place, bucket, host, port, monkeypatch, bucket.server.create_reader_keys())


@pytest.fixture(params=PLACES, ids=[place.name for place in PLACES])
def rig(
    request: pytest.FixtureRequest, dataset_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Rig]:
    place: Place = request.param
    for name in ("S3_ENDPOINT_URL", "AWS_ENDPOINT_URL", "STORAGE_EMULATOR_HOST", "GCS_KEY", "GCS_SECRET"):
        monkeypatch.delenv(name, raising=False)
    server = request.getfixturevalue("s3_bucket" if place.store == "s3" else "azure_container")
    if place.store == "azure":
        monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")  # each place names its own account
    server.upload_folder(dataset_folder, "ds")
    host, port = server.server.host, server.server.port
    if place.store == "azure":
        yield Rig(place, server, host, port, monkeypatch)
        return
    rig = s3_rig(place, server, monkeypatch, host, port)
    with rig.enforced():
        yield rig


def all_seen(rig: Rig, error: BaseException | None, caplog: Any, capfd: Any, local: Path, *more: str) -> None:
    texts = seen_by_anyone(caplog, capfd, local, *more)
    if error is not None:
        texts.append(chain_text(error))
    assert_no_secrets(rig.secrets, *texts)


# --- a good read -------------------------------------------------------------------------------------


def test_a_read_with_debug_logging_shows_no_secret(
    rig: Rig, tmp_path: Path, debug_logs: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    access = rig.access()
    dataset, ids = read_ids(access.remote, tmp_path / "cache", access.options)
    assert ids == list(range(SAMPLES))
    all_seen(rig, None, debug_logs, capfd, tmp_path / "cache", *dataset_texts(dataset, SAMPLES // 2))


# --- every error path ----------------------------------------------------------------------------------


def test_an_unreachable_endpoint_shows_no_secret(
    rig: Rig, tmp_path: Path, debug_logs: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    access = rig.access(endpoint=f"127.0.0.1:{closed_port()}")
    with pytest.raises(StorageError) as raised:
        read_ids(access.remote, tmp_path / "cache", access.options)
    all_seen(rig, raised.value, debug_logs, capfd, tmp_path / "cache")


def test_a_refused_secret_is_access_denied_and_shows_no_secret(
    rig: Rig, tmp_path: Path, debug_logs: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    access = rig.access(right=False)
    with pytest.raises(RemoteAccessDeniedError) as raised:
        read_ids(access.remote, tmp_path / "cache", access.options)
    all_seen(rig, raised.value, debug_logs, capfd, tmp_path / "cache")


def test_a_missing_index_is_not_found_and_shows_no_secret(
    rig: Rig, tmp_path: Path, debug_logs: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    access = rig.access(prefix="nothing-here")
    with pytest.raises(RemoteNotFoundError, match=r"nothing-here/index\.json") as raised:
        read_ids(access.remote, tmp_path / "cache", access.options)
    all_seen(rig, raised.value, debug_logs, capfd, tmp_path / "cache")


def test_a_remote_changed_under_a_warm_cache_shows_no_secret(
    rig: Rig, tmp_path: Path, debug_logs: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    access = rig.access()
    assert read_ids(access.remote, tmp_path / "cache", access.options)[1] == list(range(SAMPLES))
    rig.rewrite_index()
    with pytest.raises(RemoteChangedError, match="found it rewritten") as raised:
        read_ids(access.remote, tmp_path / "cache", access.options)
    all_seen(rig, raised.value, debug_logs, capfd, tmp_path / "cache")


@pytest.mark.parametrize("place", S3_PLACES, ids=[place.name for place in S3_PLACES])
def test_a_truncated_shard_shows_no_secret(
    place: Place,
    s3_bucket: S3Bucket,
    dataset_folder: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    debug_logs: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """S3 and GCS's S3 API only: the Azure SDK re-reads a body cut short by itself (see support.remotes)."""
    for name in ("S3_ENDPOINT_URL", "AWS_ENDPOINT_URL", "GCS_KEY", "GCS_SECRET"):
        monkeypatch.delenv(name, raising=False)
    s3_bucket.upload_folder(dataset_folder, "ds")
    rig = s3_rig(place, s3_bucket, monkeypatch, s3_bucket.server.host, s3_bucket.server.port)
    upstream = (rig.host, rig.port)
    with rig.enforced(), FaultProxy(upstream, [FaultRule("truncate", path_contains="shard")]) as proxy:
        access = rig.access(endpoint=f"127.0.0.1:{proxy.port}")
        with pytest.raises(StorageError, match="IncompleteRead|truncated") as raised:
            read_ids(access.remote, tmp_path / "cache", access.options)
        assert proxy.injected["truncate"] >= 1
    all_seen(rig, raised.value, debug_logs, capfd, tmp_path / "cache")
