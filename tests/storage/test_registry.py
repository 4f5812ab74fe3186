"""open_store scheme dispatch (built-ins and real entry-point plugins), split_out, is_remote, join_key."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from stream_plugin.errors import ConfigError, MissingDependencyError
from stream_plugin.storage import (
    HttpStore,
    LocalStore,
    ObjectStore,
    S3Store,
    is_remote,
    join_key,
    known_schemes,
    open_store,
    split_out,
)

PLUGIN_MODULE = '''
class MemStore:
    """A toy in-memory store, enough to prove the factory was found and called."""

    def __init__(self, url, *, greeting="hello"):
        self.url = url
        self.greeting = greeting
        self.objects = {}

    def download(self, key, dest, *, timeout=None):
        data = self.objects[key]
        with open(dest, "wb") as handle:
            handle.write(data)
        return len(data)

    def upload(self, src, key):
        with open(src, "rb") as handle:
            self.objects[key] = handle.read()

    def read_bytes(self, key, *, timeout=None):
        return self.objects[key]

    def exists(self, key):
        return key in self.objects

    def list(self, prefix=""):
        return sorted(key for key in self.objects if key.startswith(prefix))

    def identity(self, key, *, timeout=None):
        return None


def open_mem_store(url, **options):
    return MemStore(url, **options)


NOT_A_FACTORY = 42
'''

ENTRY_POINTS = """
[stream_plugin.storage]
mem = sp_test_memplugin:open_mem_store
broken = sp_test_missing_module:factory
notcallable = sp_test_memplugin:NOT_A_FACTORY
"""


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A real installed distribution (module + .dist-info with entry_points.txt) on sys.path."""
    site = tmp_path / "site-packages"
    dist_info = site / "sp_test_memplugin-1.0.dist-info"
    dist_info.mkdir(parents=True)
    (site / "sp_test_memplugin.py").write_text(PLUGIN_MODULE)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: sp-test-memplugin\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS))
    monkeypatch.syspath_prepend(str(site))  # Also invalidates import caches.
    yield
    sys.modules.pop("sp_test_memplugin", None)


def test_local_paths_and_file_urls_open_a_local_store(tmp_path: Path) -> None:
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert isinstance(open_store(tmp_path), LocalStore)
    assert isinstance(open_store("relative/dir"), LocalStore)
    assert isinstance(open_store(tmp_path.as_uri()), LocalStore)


def test_s3_and_http_urls_open_their_stores() -> None:
    s3 = open_store("s3://bucket/prefix", endpoint_url="http://127.0.0.1:1")
    assert isinstance(s3, S3Store)
    assert (s3.bucket, s3.prefix, s3.endpoint_url) == ("bucket", "prefix", "http://127.0.0.1:1")
    assert isinstance(open_store("http://host/data"), HttpStore)
    assert isinstance(open_store("HTTPS://host/data"), HttpStore)


@pytest.mark.parametrize(
    ("url", "options", "class_name"),
    [
        ("gs://bucket/prefix", {"anonymous": True}, "GcsStore"),
        ("azure://container/prefix", {"account_name": "acct"}, "AzureStore"),
        ("az://container/prefix", {"account_name": "acct"}, "AzureStore"),
        ("memory://bucket/prefix", {}, "FsspecStore"),
    ],
)
def test_gcs_azure_and_fsspec_urls_open_their_stores(url: str, options: dict[str, object], class_name: str) -> None:
    store = open_store(url, **options)
    assert type(store).__name__ == class_name
    assert isinstance(store, ObjectStore)
    assert store.url == url


def test_unknown_scheme_lists_known_schemes_and_how_to_add_one() -> None:
    pattern = (
        r"Expected a URL scheme in \[.*'az'.*'azure'.*'file'.*'gs'.*'s3'.*\] or one fsspec knows, found 'gopher'; "
        r".*install 'stream-plugin\[fsspec\]'.*\[project.entry-points.\"stream_plugin.storage\"\]"
    )
    with pytest.raises(ConfigError, match=pattern):
        open_store("gopher://host/data")


def test_options_the_store_does_not_take_are_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"expected options of the file:// store \(it takes none\), found unknown option\(s\) \[.endpoint_url.\]"
    ):
        open_store(str(tmp_path), endpoint_url="http://x")


def test_entry_point_plugin_serves_its_scheme_with_options(installed_plugin: None, tmp_path: Path) -> None:
    assert "mem" in known_schemes()
    store = open_store("mem://space/data", greeting="hi")
    assert isinstance(store, ObjectStore)
    assert (type(store).__name__, store.url, store.greeting) == ("MemStore", "mem://space/data", "hi")  # type: ignore[attr-defined]
    source = tmp_path / "src"
    source.write_bytes(b"payload")
    store.upload(source, "k")
    assert store.read_bytes("k") == b"payload"


def test_plugin_that_fails_to_import_is_a_missing_dependency(installed_plugin: None) -> None:
    with pytest.raises(
        MissingDependencyError, match=r"storage plugin 'sp_test_missing_module:factory' for scheme 'broken'"
    ):
        open_store("broken://x")


def test_plugin_entry_point_naming_a_non_callable_is_a_config_error(installed_plugin: None) -> None:
    with pytest.raises(ConfigError, match=r"to name a callable factory\(url, \*\*options\), found int"):
        open_store("notcallable://x")


def test_builtin_schemes_cannot_be_overridden_by_plugins(installed_plugin: None) -> None:
    assert isinstance(open_store("s3://bucket"), S3Store)


@pytest.mark.parametrize(
    ("url", "remote"),
    [
        ("/data/x", False),
        ("relative", False),
        ("file:///data/x", False),
        ("C:\\data\\x", False),
        ("s3://bucket/x", True),
        ("https://host/x", True),
        ("gs://bucket/x", True),
        (None, False),
    ],
)
def test_is_remote(url: str | None, remote: bool) -> None:
    assert is_remote(url) is remote


def test_split_out_follows_mosaicml() -> None:
    assert split_out("/local/dir") == ("/local/dir", None)
    assert split_out("s3://bucket/x") == (None, "s3://bucket/x")
    assert split_out(("/local/dir", "s3://bucket/x")) == ("/local/dir", "s3://bucket/x")
    assert split_out(["/local/dir", "s3://bucket/x"]) == ("/local/dir", "s3://bucket/x")  # type: ignore[arg-type]


def test_split_out_rejects_malformed_values() -> None:
    with pytest.raises(ConfigError, match=r"Expected out=\(local_dir, remote_url\), found \('a',\)"):
        split_out(("a",))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="first element of out=.* found 's3://b/x'; swap them"):
        split_out(("s3://b/x", "/local"))
    with pytest.raises(ConfigError, match="found int; pass a string"):
        split_out(3)  # type: ignore[arg-type]


def test_join_key_collapses_slashes_and_drops_empty_parts() -> None:
    assert join_key("a/", "", "/b", "c/") == "a/b/c"
    assert join_key("", "") == ""
    assert join_key("prefix", "shard.00000.mds") == "prefix/shard.00000.mds"
