"""One face for every object store the shared remote scenarios run against: S3 (moto), GCS
(gcp-storage-emulator) and Azure Blob (Azurite), each a real server on loopback.

Use the ``remote`` fixture (parametrised over the stores) to run a scenario on each; it points
``open_store`` at the server through the environment (inherited by subprocesses), the way a user's
job finds its endpoint. ``remote_proxy`` puts a :class:`FaultProxy` in front of the server and
points the environment at the proxy instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.fault_proxy import FaultKind, FaultProxy, FaultRule

STORES = ("s3", "gcs", "azure")


@dataclass
class Remote:
    """A fresh bucket (or container) on one store's server, and how to reach it."""

    name: str  # "s3", "gcs" or "azure"
    place: Any  # the S3Bucket, GcsBucket or AzureContainer of the store's rig
    host: str
    port: int
    # Requests that carry an upload, as the fault proxy classifies them (GCS uploads are POSTs), and
    # what their path holds: the key for S3 and Azure; GCS sends the object name in the body.
    upload_kinds: frozenset[str]
    upload_marker: str
    # Faults the client reports to us rather than curing by itself: the Azure SDK re-reads a body cut
    # short on its own, so a truncation never reaches our retry loop (and our retry counts) there.
    download_faults: tuple[FaultKind, ...]

    def upload_rule(self, fault: FaultKind, **when: Any) -> FaultRule:
        """A rule that fires on this store's shard uploads (in upload order: use ``skip`` / ``limit``)."""
        return FaultRule(fault, kinds=self.upload_kinds, path_contains=self.upload_marker, **when)

    def url(self, prefix: str = "") -> str:
        return str(self.place.url(prefix))

    def upload_folder(self, folder: str | os.PathLike[str], prefix: str = "") -> list[str]:
        keys: list[str] = self.place.upload_folder(folder, prefix)
        return keys

    def keys(self, prefix: str = "") -> list[str]:
        found: list[str] = self.place.keys(prefix)
        return found

    def environment(self, endpoint_url: str | None = None) -> dict[str, str]:
        """Environment variables that point ``open_store`` at the server, or at ``endpoint_url`` (a proxy)."""
        endpoint = endpoint_url or f"http://{self.host}:{self.port}"
        if self.name == "s3":
            return {**self.place.credentials, "S3_ENDPOINT_URL": endpoint}
        if self.name == "gcs":
            return {"STORAGE_EMULATOR_HOST": endpoint}
        from support.azure_server import ACCOUNT

        return {
            "AZURE_STORAGE_CONNECTION_STRING": self.place.server.connection_string(f"{endpoint}/{ACCOUNT}")
        }

    def point_at(self, monkeypatch: pytest.MonkeyPatch, endpoint_url: str | None = None) -> None:
        for name, value in self.environment(endpoint_url).items():
            monkeypatch.setenv(name, value)


def open_remote(request: pytest.FixtureRequest, name: str) -> Remote:
    """The rig of store ``name`` (its fixtures start the server once per session)."""
    if name == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        return Remote(
            name,
            bucket,
            bucket.server.host,
            bucket.server.port,
            frozenset({"put"}),
            "shard",
            ("http_503", "reset", "truncate"),
        )
    if name == "gcs":
        bucket = request.getfixturevalue("gcs_bucket")
        return Remote(
            name,
            bucket,
            bucket.server.host,
            bucket.server.port,
            frozenset({"post", "put"}),
            "/upload/",
            ("http_503", "reset", "truncate"),
        )
    container = request.getfixturevalue("azure_container")
    server = container.server
    return Remote(name, container, server.host, server.port, frozenset({"put"}), "shard", ("http_503", "reset"))


@pytest.fixture(params=STORES)
def remote(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Remote:
    """A fresh bucket on each store in turn; the environment points ``open_store`` at its server."""
    found = open_remote(request, request.param)
    found.point_at(monkeypatch)
    return found


@pytest.fixture
def remote_proxy(remote: Remote, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """A fault proxy in front of ``remote``'s server, with no rules yet; the environment points at it,
    so ``open_store`` here and in child processes goes through it and ``proxy.requests`` counts them."""
    with FaultProxy((remote.host, remote.port), stall_seconds=2.0) as proxy:
        remote.point_at(monkeypatch, proxy.endpoint_url)
        yield proxy
