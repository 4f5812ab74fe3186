"""FsspecStore: fsspec's in-memory filesystem, and fsspec's HTTP filesystem against a loopback server."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest
from fsspec.registry import known_implementations
from support.fault_proxy import FaultProxy, FaultRule

from stream_plugin.errors import ConfigError, MissingDependencyError
from stream_plugin.storage import (
    FsspecStore,
    RemoteNotFoundError,
    RetryPolicy,
    TransientStorageError,
    call_with_retries,
    open_store,
)

FAST_RETRIES = RetryPolicy(attempts=4, timeout=1.0, base_delay=0.0, max_delay=0.0, jitter=0.0)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture
def memory_url(tmp_path: Path) -> str:
    """A fresh root on fsspec's process-wide memory filesystem."""
    return f"memory://{tmp_path.name}/root"


def test_memory_urls_fall_back_to_fsspec_and_round_trip(memory_url: str, tmp_path: Path) -> None:
    store = open_store(memory_url)
    assert isinstance(store, FsspecStore)
    store.upload(write(tmp_path / "a", b"alpha"), "data/a.bin")
    store.upload(write(tmp_path / "b", b"beta!"), "data/b.bin")
    store.upload(write(tmp_path / "i", b"{}"), "index.json")
    open_store(memory_url + "x").upload(write(tmp_path / "s", b"sibling"), "not-mine")

    assert store.download("data/a.bin", tmp_path / "out") == 5
    assert (tmp_path / "out").read_bytes() == b"alpha"
    assert store.read_bytes("index.json") == b"{}"
    assert store.exists("data/b.bin")
    assert not store.exists("data")
    assert store.list() == ["data/a.bin", "data/b.bin", "index.json"]
    assert store.list("data/") == ["data/a.bin", "data/b.bin"]
    assert store.list("nothing/") == []


def test_missing_key_is_not_found_and_fails_fast(memory_url: str, tmp_path: Path) -> None:
    store = open_store(memory_url)
    calls = []

    def attempt() -> int:
        calls.append(1)
        return store.download("absent.bin", tmp_path / "out")

    with pytest.raises(RemoteNotFoundError, match=r"absent\.bin to exist to download it.*check the path"):
        call_with_retries(attempt, FAST_RETRIES, describe="download absent.bin")
    assert len(calls) == 1
    assert not store.exists("absent.bin")


def test_identity_comes_from_info_and_changes_when_the_file_is_rewritten(memory_url: str, tmp_path: Path) -> None:
    store = open_store(memory_url)
    store.upload(write(tmp_path / "i", b"one"), "index.json")
    first = store.identity("index.json")
    assert first is not None and first.startswith("created=")
    store.upload(write(tmp_path / "i", b"two"), "index.json")
    assert store.identity("index.json") not in (None, first)


def test_store_pickles_as_url_and_options(memory_url: str, tmp_path: Path) -> None:
    store = open_store(memory_url, skip_instance_cache=True)
    store.upload(write(tmp_path / "k", b"v"), "k")
    clone = pickle.loads(pickle.dumps(store))
    assert clone.storage_options == {"skip_instance_cache": True}
    assert clone.read_bytes("k") == b"v"  # the memory filesystem's contents are process-wide


def test_http_filesystem_reads_a_loopback_server(http_root: tuple[Path, str], tmp_path: Path) -> None:
    folder, base = http_root
    (folder / "data").mkdir()
    (folder / "data" / "index.json").write_bytes(b'{"version": 2}')
    store = FsspecStore(f"{base}/data")
    assert store.read_bytes("index.json") == b'{"version": 2}'
    assert store.download("index.json", tmp_path / "out") == 14
    assert store.exists("index.json")
    assert not store.exists("absent.json")
    assert store.identity("index.json") is not None  # http.server sends Last-Modified
    with pytest.raises(RemoteNotFoundError, match="absent.json"):
        store.read_bytes("absent.json")


def test_http_server_errors_are_transient(http_root: tuple[Path, str], tmp_path: Path) -> None:
    folder, base = http_root
    (folder / "data").mkdir()
    (folder / "data" / "k").write_bytes(b"v" * 100)
    host, port = base.removeprefix("http://").split(":")
    rules = [FaultRule("http_503", kinds=frozenset({"get", "head"}), path_contains="/data/k", limit=1)]
    with FaultProxy((host, int(port)), rules) as proxy:
        store = FsspecStore(f"{proxy.endpoint_url}/data")
        with pytest.raises(TransientStorageError, match="will retry"):
            store.read_bytes("k")
        assert store.read_bytes("k") == b"v" * 100
        assert proxy.injected["http_503"] == 1


def test_missing_fsspec_implementation_names_the_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        known_implementations,
        "sptest",
        {"class": "sp_test_absent_module.FileSystem", "err": "Install sp-test-absent to access sptest://"},
    )
    with pytest.raises(MissingDependencyError, match=r"fsspec implementation for sptest:// .*Install sp-test-absent"):
        open_store("sptest://bucket/data")


def test_scheme_unknown_without_fsspec_says_to_install_the_fsspec_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec.registry", None)  # what an uninstalled fsspec looks like
    with pytest.raises(ConfigError, match=r"found 'memory'; .*install 'stream-plugin\[fsspec\]'"):
        open_store("memory://bucket/data")
