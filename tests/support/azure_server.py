"""A real Azure Blob endpoint on loopback for tests: Azurite (Microsoft's emulator), plus per-test containers.

Azurite is an npm package that ``scripts/lib/venv.sh`` (``ensure_azurite``) installs into the gitignored
``.tools/azurite``. ``azure_server`` (session-scoped) starts one in-memory Azurite on a free loopback
port; ``azure_container`` gives each test a fresh container and sets ``AZURE_STORAGE_CONNECTION_STRING``
(via monkeypatch, so subprocesses inherit it).
"""

from __future__ import annotations

import itertools
import os
import queue
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest
from azure.storage.blob import BlobServiceClient, ContainerClient
from support.paths import REPO_DIR

AZURITE = REPO_DIR / ".tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
STARTUP_SECONDS = 60.0
# Azurite's well-known development account (public, documented by Microsoft).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
LISTENING = re.compile(r"successfully listens on (http://[\d.]+:\d+)")


@dataclass
class AzureServer:
    """A running Azurite: its blob endpoint and helpers to build connection strings and clients."""

    host: str
    port: int
    _names: Iterator[int] = field(default_factory=itertools.count)

    @property
    def endpoint_url(self) -> str:
        """The account's blob endpoint (Azurite puts the account name in the path)."""
        return f"http://{self.host}:{self.port}/{ACCOUNT}"

    def connection_string(self, endpoint_url: str | None = None) -> str:
        """A connection string for the development account at ``endpoint_url`` (default: Azurite itself)."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={endpoint_url or self.endpoint_url};"
        )

    def service(self) -> BlobServiceClient:
        return BlobServiceClient.from_connection_string(self.connection_string(), retry_total=0)

    def create_container(self, prefix: str = "container") -> AzureContainer:
        """A new empty container with a name unique in this session."""
        name = f"{prefix}-{os.getpid()}-{next(self._names)}"
        client = self.service().create_container(name)
        return AzureContainer(server=self, name=name, client=client)


@dataclass
class AzureContainer:
    """One container on an :class:`AzureServer`, with helpers to put and get test data."""

    server: AzureServer
    name: str
    client: ContainerClient

    @property
    def store_options(self) -> dict[str, str]:
        """Options for ``open_store(container.url(...), **container.store_options)``."""
        return {"connection_string": self.server.connection_string()}

    @property
    def environment(self) -> dict[str, str]:
        """What a subprocess needs to reach Azurite through ``open_store`` alone."""
        return {"AZURE_STORAGE_CONNECTION_STRING": self.server.connection_string()}

    def url(self, prefix: str = "") -> str:
        """``azure://<container>/<prefix>``."""
        return f"azure://{self.name}/{prefix.strip('/')}".rstrip("/")

    def put(self, key: str, data: bytes) -> None:
        self.client.upload_blob(key, data, overwrite=True)

    def get(self, key: str) -> bytes:
        return self.client.download_blob(key).readall()

    def keys(self, prefix: str = "") -> list[str]:
        return sorted(self.client.list_blob_names(name_starts_with=prefix))

    def upload_folder(self, folder: str | os.PathLike[str], prefix: str = "") -> list[str]:
        """Upload every file under ``folder`` to ``<prefix>/<relative path>``; return the keys."""
        root = Path(folder)
        keys = []
        for path in sorted(root.rglob("*")):
            if path.is_file():
                key = "/".join(part for part in (prefix.strip("/"), path.relative_to(root).as_posix()) if part)
                with open(path, "rb") as handle:
                    self.client.upload_blob(key, handle, overwrite=True)
                keys.append(key)
        return keys


def _drain(stream: IO[str], lines: queue.Queue[str]) -> None:
    """Forward Azurite's output lines (its pipe must never fill up, or it would block)."""
    for line in stream:
        lines.put(line)


def start_azurite(workdir: Path) -> tuple[subprocess.Popen[str], AzureServer]:
    """Start Azurite in memory on a free loopback port; wait (bounded) until it listens."""
    if not AZURITE.exists():
        raise RuntimeError(
            f"Expected Azurite at {AZURITE}, found none; run ./scripts/test once, or "
            f"'source scripts/lib/venv.sh && ensure_azurite' (an npm install into .tools/azurite)."
        )
    process = subprocess.Popen(
        [
            str(AZURITE),
            "--blobHost", "127.0.0.1",
            "--blobPort", "0",
            "--inMemoryPersistence",
            "--extentMemoryLimit", "512",
            "--skipApiVersionCheck",
            "--loose",
            "--disableTelemetry",
            "--silent",
        ],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_drain, args=(process.stdout, lines), daemon=True).start()
    seen = []
    try:
        while True:
            line = lines.get(timeout=STARTUP_SECONDS)
            seen.append(line)
            found = LISTENING.search(line)
            if found:
                host, port = found.group(1).removeprefix("http://").split(":")
                return process, AzureServer(host=host, port=int(port))
    except queue.Empty:
        process.kill()
        process.wait()
        raise RuntimeError(
            f"Expected Azurite to listen within {STARTUP_SECONDS} s, found only this output: {''.join(seen)!r}"
        ) from None


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureServer]:
    """One in-memory Azurite for the whole test session."""
    process, server = start_azurite(tmp_path_factory.mktemp("azurite"))
    try:
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def isolate_from_azure_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the store off the developer's Azure account variables."""
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_ACCOUNT_NAME", "AZURE_ACCOUNT_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def azure_container(azure_server: AzureServer, monkeypatch: pytest.MonkeyPatch) -> AzureContainer:
    """A fresh container per test; ``AZURE_STORAGE_CONNECTION_STRING`` points at Azurite."""
    isolate_from_azure_config(monkeypatch)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure_server.connection_string())
    return azure_server.create_container()
