"""A real GCS endpoint on loopback for tests: ``gcp-storage-emulator`` (JSON API), plus per-test buckets.

``gcs_server`` (session-scoped) runs one in-memory emulator for the whole session on a free port;
``gcs_bucket`` gives each test a fresh, empty bucket and sets ``STORAGE_EMULATOR_HOST`` (via
monkeypatch, so subprocesses inherit it) the way Google's own client reads it.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from gcp_storage_emulator.server import create_server
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage


@dataclass
class GcsServer:
    """A running emulator: its ``endpoint_url`` and a client for arranging test data."""

    endpoint_url: str
    host: str
    port: int
    _names: Iterator[int] = field(default_factory=itertools.count)

    def client(self) -> storage.Client:
        return storage.Client(
            project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": self.endpoint_url}
        )

    def create_bucket(self, prefix: str = "bucket") -> GcsBucket:
        """A new empty bucket with a name unique in this session."""
        name = f"{prefix}-{os.getpid()}-{next(self._names)}"
        client = self.client()
        client.create_bucket(name)
        return GcsBucket(server=self, name=name, bucket=client.bucket(name))


@dataclass
class GcsBucket:
    """One bucket on a :class:`GcsServer`, with helpers to put and get test data."""

    server: GcsServer
    name: str
    bucket: storage.Bucket

    @property
    def endpoint_url(self) -> str:
        return self.server.endpoint_url

    @property
    def store_options(self) -> dict[str, Any]:
        """Options for ``open_store(bucket.url(...), **bucket.store_options)``: the emulator takes
        anonymous requests (an explicit endpoint would otherwise look for Google credentials)."""
        return {"endpoint_url": self.server.endpoint_url, "anonymous": True}

    @property
    def environment(self) -> dict[str, str]:
        """What a subprocess needs to reach the emulator through ``open_store`` alone."""
        return {"STORAGE_EMULATOR_HOST": self.server.endpoint_url}

    def url(self, prefix: str = "") -> str:
        """``gs://<bucket>/<prefix>``."""
        return f"gs://{self.name}/{prefix.strip('/')}".rstrip("/")

    def put(self, key: str, data: bytes) -> None:
        self.bucket.blob(key).upload_from_string(data)

    def get(self, key: str) -> bytes:
        return self.bucket.blob(key).download_as_bytes()

    def keys(self, prefix: str = "") -> list[str]:
        return sorted(blob.name for blob in self.bucket.client.list_blobs(self.name, prefix=prefix))

    def upload_folder(self, folder: str | os.PathLike[str], prefix: str = "") -> list[str]:
        """Upload every file under ``folder`` to ``<prefix>/<relative path>``; return the keys."""
        root = Path(folder)
        keys = []
        for path in sorted(root.rglob("*")):
            if path.is_file():
                key = "/".join(part for part in (prefix.strip("/"), path.relative_to(root).as_posix()) if part)
                self.bucket.blob(key).upload_from_filename(str(path))
                keys.append(key)
        return keys


def isolate_from_google_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the client off the developer's credentials, HMAC keys and metadata server."""
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "GCS_KEY", "GCS_SECRET", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    # Nothing listens on port 9: no metadata server is ever reached (google-auth reads both names).
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", os.devnull)


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsServer]:
    """One in-memory gcp-storage-emulator for the whole test session, on a free loopback port."""
    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    server = create_server("127.0.0.1", 0, in_memory=True)
    server.start()
    port = server._api._httpd.server_address[1]  # port 0 above: the OS picked it
    try:
        yield GcsServer(endpoint_url=f"http://127.0.0.1:{port}", host="127.0.0.1", port=port)
    finally:
        server.stop()


@pytest.fixture
def gcs_bucket(gcs_server: GcsServer, monkeypatch: pytest.MonkeyPatch) -> GcsBucket:
    """A fresh bucket per test; ``STORAGE_EMULATOR_HOST`` points at the emulator."""
    isolate_from_google_config(monkeypatch)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.endpoint_url)
    return gcs_server.create_bucket()
