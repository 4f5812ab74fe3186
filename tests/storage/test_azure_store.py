"""AzureStore against a real Azure Blob emulator (Azurite) over loopback HTTP."""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.azure_server import ACCOUNT, KEY, AzureContainer
from support.fault_proxy import FaultProxy, FaultRule

from stream_plugin.errors import ConfigError, MissingDependencyError
from stream_plugin.storage import (
    AzureStore,
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    RetryPolicy,
    TransientStorageError,
    call_with_retries,
    open_store,
)
from stream_plugin.storage.base import ThrottledError

TIMEOUT = 0.5
FAST_RETRIES = RetryPolicy(attempts=4, timeout=TIMEOUT, base_delay=0.0, max_delay=0.0, jitter=0.0)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture
def azure_store(azure_container: AzureContainer) -> AzureStore:
    store = open_store(azure_container.url("root"))
    assert isinstance(store, AzureStore)
    return store


@pytest.fixture
def azure_proxy(azure_container: AzureContainer) -> Iterator[FaultProxy]:
    server = azure_container.server
    # Stalls outlast the 0.5 s client timeout 20 times; one ends early when the client hangs up.
    with FaultProxy((server.host, server.port), stall_seconds=10.0) as proxy:
        yield proxy


def proxied(container: AzureContainer, proxy: FaultProxy) -> AzureStore:
    endpoint = f"{proxy.endpoint_url}/{ACCOUNT}"
    return AzureStore(container.url("root"), connection_string=container.server.connection_string(endpoint))


def test_upload_then_download_read_exists_and_list_round_trip(
    azure_store: AzureStore, azure_container: AzureContainer, tmp_path: Path
) -> None:
    azure_store.upload(write(tmp_path / "a", b"alpha"), "data/a.bin")
    azure_store.upload(write(tmp_path / "b", b"beta!"), "data/b.bin")
    azure_store.upload(write(tmp_path / "i", b"{}"), "index.json")
    azure_container.put("rootx/not-mine", b"sibling prefix")

    assert azure_container.keys() == ["root/data/a.bin", "root/data/b.bin", "root/index.json", "rootx/not-mine"]
    assert azure_store.download("data/a.bin", tmp_path / "out") == 5
    assert (tmp_path / "out").read_bytes() == b"alpha"
    assert azure_store.read_bytes("index.json") == b"{}"
    assert azure_store.exists("data/b.bin")
    assert not azure_store.exists("data")
    assert azure_store.list() == ["data/a.bin", "data/b.bin", "index.json"]
    assert azure_store.list("data/") == ["data/a.bin", "data/b.bin"]


def test_large_blob_uploads_in_blocks_and_downloads_intact(azure_store: AzureStore, tmp_path: Path) -> None:
    payload = os.urandom(9 << 20)
    azure_store.upload(write(tmp_path / "big", payload), "big.bin")
    assert azure_store.download("big.bin", tmp_path / "out") == len(payload)
    assert (tmp_path / "out").read_bytes() == payload


def test_az_scheme_and_account_variables_reach_the_same_container(
    azure_container: AzureContainer, monkeypatch: pytest.MonkeyPatch
) -> None:
    azure_container.put("root/k", b"via account variables")
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv("AZURE_ACCOUNT_NAME", ACCOUNT)
    monkeypatch.setenv("AZURE_ACCOUNT_ACCESS_KEY", KEY)
    store = open_store(f"az://{azure_container.name}/root", endpoint_url=azure_container.server.endpoint_url)
    assert isinstance(store, AzureStore)
    assert store.read_bytes("k") == b"via account variables"


def test_missing_key_is_not_found_naming_container_and_key_and_fails_fast(
    azure_store: AzureStore, azure_container: AzureContainer, tmp_path: Path
) -> None:
    pattern = rf"azure://{azure_container.name}/root/absent\.bin .*BlobNotFound; check the path"
    with pytest.raises(RemoteNotFoundError, match=pattern):
        azure_store.read_bytes("absent.bin")
    calls = []

    def attempt() -> int:
        calls.append(1)
        return azure_store.download("absent.bin", tmp_path / "out")

    with pytest.raises(RemoteNotFoundError, match=pattern):
        call_with_retries(attempt, FAST_RETRIES, describe="download absent.bin")
    assert len(calls) == 1
    assert not azure_store.exists("absent.bin")


def test_identity_is_etag_and_last_modified_and_changes_when_the_blob_is_rewritten(
    azure_store: AzureStore, tmp_path: Path
) -> None:
    azure_store.upload(write(tmp_path / "i", b"one"), "index.json")
    first = azure_store.identity("index.json")
    assert first is not None and first.startswith("etag=") and " modified=" in first
    assert azure_store.identity("index.json") == first
    azure_store.upload(write(tmp_path / "i", b"two"), "index.json")
    assert azure_store.identity("index.json") not in (None, first)
    with pytest.raises(RemoteNotFoundError):
        azure_store.identity("absent.json")


def test_wrong_account_key_is_access_denied_and_fails_fast(azure_container: AzureContainer) -> None:
    azure_container.put("root/k", b"v")
    wrong = KEY[:-4] + "AAA="
    store = AzureStore(
        azure_container.url("root"),
        account_name=ACCOUNT,
        account_key=wrong,
        endpoint_url=azure_container.server.endpoint_url,
    )
    calls = []

    def attempt() -> bytes:
        calls.append(1)
        return store.read_bytes("k")

    with pytest.raises(RemoteAccessDeniedError, match="check the credentials"):
        call_with_retries(attempt, FAST_RETRIES, describe="read k")
    assert len(calls) == 1


def test_server_errors_and_resets_are_transient(
    azure_container: AzureContainer, azure_proxy: FaultProxy, tmp_path: Path
) -> None:
    azure_container.put("root/k", b"v" * 1000)
    store = proxied(azure_container, azure_proxy)
    for fault in ("http_503", "reset"):
        azure_proxy.set_rules(FaultRule(fault, path_contains="/root/k", limit=1))
        with pytest.raises(TransientStorageError, match="will retry"):
            store.download("k", tmp_path / "out", timeout=5)
        assert store.download("k", tmp_path / "out", timeout=5) == 1000
    assert azure_proxy.injected == {"http_503": 1, "reset": 1}


@pytest.mark.parametrize(("fault", "wait"), [("http_429", 0.0), ("server_busy", None)])
def test_a_429_and_a_503_server_busy_are_throttling_not_failed_attempts(
    fault: str, wait: float | None, azure_container: AzureContainer, azure_proxy: FaultProxy, tmp_path: Path
) -> None:
    azure_container.put("root/k", b"v" * 1000)
    store = proxied(azure_container, azure_proxy)
    azure_proxy.set_rules(FaultRule(fault, path_contains="/root/k", limit=1))  # type: ignore[arg-type]
    with pytest.raises(ThrottledError, match="rate limit") as caught:
        store.download("k", tmp_path / "out", timeout=5)
    assert caught.value.wait == wait
    assert store.download("k", tmp_path / "out", timeout=5) == 1000


def test_stalled_server_times_out_as_transient_within_the_timeout(
    azure_container: AzureContainer, azure_proxy: FaultProxy, tmp_path: Path
) -> None:
    azure_container.put("root/k", b"v")
    store = proxied(azure_container, azure_proxy)
    azure_proxy.set_rules(FaultRule("stall", path_contains="/root/k"))
    with pytest.raises(TransientStorageError, match="will retry"):
        store.download("k", tmp_path / "out", timeout=TIMEOUT)
    # By the proxy's clock: the client hung up on its own, long before the stall would have ended
    # (a client without the timeout would also fail "will retry", once the proxy closed on it).
    (stall,) = azure_proxy.finished_stalls(1)
    assert stall.client_left is not None, f"the client waited out the whole {azure_proxy.stall_seconds} s stall"


def test_store_pickles_without_its_client_and_works_after_unpickling(
    azure_store: AzureStore, azure_container: AzureContainer
) -> None:
    azure_container.put("root/k", b"v")
    assert azure_store.read_bytes("k") == b"v"
    clone = pickle.loads(pickle.dumps(azure_store))
    assert clone.read_bytes("k") == b"v"
    assert clone.client() is not azure_store.client()


def test_no_account_is_a_config_error_naming_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"found none; set AZURE_ACCOUNT_NAME .*AZURE_STORAGE_CONNECTION_STRING"):
        AzureStore("azure://container/x", environ={})


def test_url_without_container_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"Expected an Azure URL like 'azure://container/prefix'.*found 'az:///x'"):
        AzureStore("az:///x", environ={"AZURE_ACCOUNT_NAME": "a"})


def test_missing_azure_storage_blob_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "stream_plugin.storage.azure", raising=False)
    monkeypatch.setitem(sys.modules, "azure.storage.blob", None)  # what an uninstalled package looks like
    with pytest.raises(MissingDependencyError, match=r"azure:// backend .* pip install 'stream-plugin\[azure\]'"):
        open_store("azure://c/p")
