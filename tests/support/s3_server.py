"""A real S3 endpoint on loopback for tests: moto's threaded server, plus per-test buckets.

Use from any conftest::

    from support.s3_server import s3_server, s3_bucket  # noqa: F401  (pytest fixtures)

``s3_server`` (session-scoped) runs one moto server for the whole session; ``s3_bucket`` gives each
test a fresh, empty bucket and sets ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / region in the
environment (via monkeypatch) so any boto3 client in the test, or in a subprocess it starts, signs
requests moto accepts. ``S3_ENDPOINT_URL`` is *not* set, so tests choose how to pass the endpoint.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}


ALLOW_S3 = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
)
TRUST_THE_ACCOUNT = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"}, "Action": "sts:AssumeRole"}
        ],
    }
)


@dataclass(frozen=True)
class S3Keys:
    """Keys moto's IAM accepts while auth is enforced: a user's, and an assumed role's session keys."""

    key_id: str
    secret: str
    session_key_id: str
    session_secret: str
    session_token: str


@dataclass
class S3Server:
    """A running moto server: ``endpoint_url`` and a boto3 ``client()`` for arranging test data."""

    endpoint_url: str
    host: str
    port: int
    _names: Iterator[int] = field(default_factory=itertools.count)

    def client(self, service: str = "s3", **config: Any) -> Any:
        """A signed boto3 client for the server, independent of the environment."""
        return boto3.client(
            service,
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(retries={"total_max_attempts": 1}, **config),
        )

    @contextmanager
    def enforce_auth(self, enforce: bool = True) -> Iterator[None]:
        """Inside, moto checks every request against its IAM: the test keys get 403 InvalidAccessKeyId,
        a wrong secret 403 SignatureDoesNotMatch, a wrong session token 403 InvalidToken; only keys
        from ``create_reader_keys`` pass. ``enforce=False`` turns the checks off inside instead.

        moto ignores bucket policies and signatures by default; this turns its IAM checks on through
        its ``/moto-api/reset-auth`` control endpoint and restores the previous setting afterwards.
        """
        previous = self._set_auth_free_requests("0" if enforce else "1000000000")
        try:
            yield
        finally:
            self._set_auth_free_requests(previous)

    def create_reader_keys(self) -> S3Keys:
        """Keys moto's IAM knows (call with auth not enforced), allowed every S3 action: a new user's
        access key, and the session keys of a role that user's account assumed."""
        name = f"reader-{os.getpid()}-{next(self._names)}"
        botocore_logs = logging.getLogger("botocore")
        level = botocore_logs.level
        botocore_logs.setLevel(logging.WARNING)  # its DEBUG records show the answers, secrets and all
        try:
            iam, sts = self.client(service="iam"), self.client(service="sts")
            iam.create_user(UserName=name)
            iam.put_user_policy(UserName=name, PolicyName="s3", PolicyDocument=ALLOW_S3)
            key = iam.create_access_key(UserName=name)["AccessKey"]
            role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=TRUST_THE_ACCOUNT)["Role"]
            iam.put_role_policy(RoleName=name, PolicyName="s3", PolicyDocument=ALLOW_S3)
            session = sts.assume_role(RoleArn=role["Arn"], RoleSessionName=name)["Credentials"]
        finally:
            botocore_logs.setLevel(level)
        return S3Keys(
            key["AccessKeyId"],
            key["SecretAccessKey"],
            session["AccessKeyId"],
            session["SecretAccessKey"],
            session["SessionToken"],
        )

    def _set_auth_free_requests(self, count: str) -> str:
        request = urllib.request.Request(
            f"{self.endpoint_url}/moto-api/reset-auth",
            data=count.encode(),
            method="POST",
            headers={"Content-Type": "text/plain"},  # A form content type would hide the body from moto.
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(json.load(response)["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"])

    def create_bucket(self, prefix: str = "bucket") -> S3Bucket:
        """A new empty bucket with a name unique in this session."""
        name = f"{prefix}-{os.getpid()}-{next(self._names)}"
        client = self.client()
        client.create_bucket(Bucket=name)
        return S3Bucket(server=self, name=name, client=client)


@dataclass
class S3Bucket:
    """One bucket on an :class:`S3Server`, with helpers to put and get test data."""

    server: S3Server
    name: str
    client: Any

    @property
    def endpoint_url(self) -> str:
        return self.server.endpoint_url

    @property
    def store_options(self) -> dict[str, str]:
        """Options for ``open_store(bucket.url(...), **bucket.store_options)``."""
        return {"endpoint_url": self.server.endpoint_url}

    @property
    def credentials(self) -> dict[str, str]:
        """The environment variables ``s3_bucket`` sets (for subprocesses started with their own env)."""
        return dict(CREDENTIALS)

    def url(self, prefix: str = "") -> str:
        """``s3://<bucket>/<prefix>``."""
        return f"s3://{self.name}/{prefix.strip('/')}".rstrip("/")

    def put(self, key: str, data: bytes, **extra: Any) -> None:
        """Store ``data`` under ``key``; ``extra`` goes to ``put_object`` (e.g. ``ACL="public-read"``)."""
        self.client.put_object(Bucket=self.name, Key=key, Body=data, **extra)

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()  # type: ignore[no-any-return]

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", ()))

    def upload_folder(self, folder: str | os.PathLike[str], prefix: str = "") -> list[str]:
        """Upload every file under ``folder`` to ``<prefix>/<relative path>``; return the keys."""
        root = Path(folder)
        keys = []
        for path in sorted(root.rglob("*")):
            if path.is_file():
                key = "/".join(
                    part for part in (prefix.strip("/"), path.relative_to(root).as_posix()) if part
                )
                self.client.upload_file(str(path), self.name, key)
                keys.append(key)
        return keys

    def set_policy(self, policy: str) -> None:
        """Attach a bucket policy (JSON text)."""
        self.client.put_bucket_policy(Bucket=self.name, Policy=policy)


def start_s3_server() -> tuple[ThreadedMotoServer, S3Server]:
    """Start moto on a free loopback port (port 0: the OS picks, so parallel sessions never clash)."""
    # werkzeug logs every request at INFO; that drowns test output.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    return moto, S3Server(endpoint_url=f"http://{host}:{port}", host=host, port=port)


def set_test_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point boto3's default chain at the fake credentials and keep it off ~/.aws and EC2 metadata."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    isolate_from_user_config(monkeypatch)


def isolate_from_user_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make boto3 ignore the developer's AWS config, endpoints and the instance-metadata service."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "S3_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One moto S3 server for the whole test session."""
    moto, server = start_s3_server()
    try:
        yield server
    finally:
        moto.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A fresh bucket per test, with test credentials set in the environment."""
    set_test_credentials(monkeypatch)
    return s3_server.create_bucket()
