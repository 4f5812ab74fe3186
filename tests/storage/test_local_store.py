"""LocalStore: plain folders and file:// URLs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stream_plugin.errors import ConfigError, StorageError
from stream_plugin.storage import LocalStore, RemoteNotFoundError


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    root = tmp_path / "remote"
    (root / "data").mkdir(parents=True)
    (root / "data" / "a.bin").write_bytes(b"alpha")
    (root / "index.json").write_bytes(b"{}")
    return LocalStore(str(root))


def test_download_copies_into_dest_and_returns_the_size(store: LocalStore, tmp_path: Path) -> None:
    assert store.download("data/a.bin", tmp_path / "out", timeout=1.0) == 5
    assert (tmp_path / "out").read_bytes() == b"alpha"


def test_file_url_serves_the_same_folder(store: LocalStore) -> None:
    by_url = LocalStore(store.root.as_uri())
    assert by_url.root == store.root
    assert by_url.read_bytes("index.json") == b"{}"


def test_file_url_on_another_host_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"found host 'server' in 'file://server/share'; mount the share"):
        LocalStore("file://server/share")


def test_missing_file_is_not_found_and_says_check_the_path(store: LocalStore, tmp_path: Path) -> None:
    with pytest.raises(RemoteNotFoundError, match=r"absent\.bin.*check the path"):
        store.download("absent.bin", tmp_path / "out")
    with pytest.raises(RemoteNotFoundError, match="check the path"):
        store.read_bytes("absent.bin")
    with pytest.raises(FileNotFoundError):  # Code written against the builtin still catches it.
        store.read_bytes("data")  # A folder is not an object.


def test_upload_creates_folders_and_leaves_no_temporary_behind(store: LocalStore, tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"new")
    store.upload(source, "deep/er/new.bin")
    assert (store.root / "deep" / "er" / "new.bin").read_bytes() == b"new"
    assert os.listdir(store.root / "deep" / "er") == ["new.bin"]


def test_upload_replaces_an_existing_object(store: LocalStore, tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"replacement")
    store.upload(source, "data/a.bin")
    assert store.read_bytes("data/a.bin") == b"replacement"


def test_upload_of_a_file_onto_itself_is_a_no_op(store: LocalStore) -> None:
    store.upload(store.root / "index.json", "index.json")
    assert store.read_bytes("index.json") == b"{}"


def test_failed_upload_leaves_no_temporary_behind(store: LocalStore, tmp_path: Path) -> None:
    with pytest.raises(RemoteNotFoundError, match="missing-source"):
        store.upload(tmp_path / "missing-source", "data/x.bin")
    assert sorted(os.listdir(store.root / "data")) == ["a.bin"]


def test_exists_is_true_only_for_files(store: LocalStore) -> None:
    assert store.exists("data/a.bin")
    assert not store.exists("data")
    assert not store.exists("absent")


def test_list_filters_by_prefix_and_hides_in_progress_uploads(store: LocalStore) -> None:
    (store.root / "data" / ".b.bin.tmp-123-abcd").write_bytes(b"partial")
    (store.root / "database.txt").write_bytes(b"x")
    assert store.list() == ["data/a.bin", "database.txt", "index.json"]
    assert store.list("data/") == ["data/a.bin"]
    assert store.list("data") == ["data/a.bin", "database.txt"]
    assert store.list("nothing/here") == []


def test_key_escaping_the_root_is_rejected(store: LocalStore) -> None:
    with pytest.raises(
        StorageError, match=r"Expected a key inside .*found '\.\./secret' with a '\.\.' segment"
    ):
        store.read_bytes("../secret")
