"""HubStore (``hf://datasets/...``) through huggingface_hub against a loopback Hub (tests/support/hub_server.py)."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path

import pytest
from huggingface_hub import constants
from support.hub_server import HubServer, hub_server  # noqa: F401  (the fixture)
from support.secret_checks import as_in_a_fresh_process, assert_no_secret, chain_text, log_texts

from stream_plugin.errors import ConfigError, StorageError
from stream_plugin.storage import (
    HubStore,
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    RetryPolicy,
    ThrottledError,
    call_with_retries,
    open_store,
)
from stream_plugin.storage.hub_url import HubLocation, parse_hub_url

TOKEN = "hf_" + "Q7wz3Kp9Lm2Xc8Rt5Vb1Nd6Hj4Gf0Sa"
LARGE = os.urandom(5000)  # above the server's LFS threshold: served through the CDN's redirect
SMALL = b'{"rows": 3}'
PARQUET = "refs/convert/parquet"


def dataset(server: HubServer, *, private: bool = False, ref: str = "main") -> str:
    return server.commit(
        "org/ds",
        {"default/train/0000.parquet": LARGE, "default/train/meta.json": SMALL, "README.md": b"# ds"},
        private=private,
        ref=ref,
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("hf://datasets/org/ds", HubLocation("org/ds", "main", "")),
        ("hf://datasets/org/ds/default/train", HubLocation("org/ds", "main", "default/train")),
        ("hf://datasets/org/ds@v1.0/x.parquet", HubLocation("org/ds", "v1.0", "x.parquet")),
        ("hf://datasets/org/ds@refs%2Fconvert%2Fparquet/default", HubLocation("org/ds", PARQUET, "default")),
        ("hf://datasets/org/ds@refs/convert/parquet/default/train", HubLocation("org/ds", PARQUET, "default/train")),
        ("hf://datasets/org/ds@refs/pr/3", HubLocation("org/ds", "refs/pr/3", "")),
    ],
)
def test_hub_urls_parse_as_hf_file_system_writes_them(url: str, expected: HubLocation) -> None:
    assert parse_hub_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("hf://org/model/x", r"repo type 'org'.*write hf://datasets/ORG/NAME"),
        ("hf://datasets/ds", r"without ORG/NAME"),
        ("hf://datasets/org/ds@/x", r"revision after '@'.*found none"),
    ],
)
def test_a_malformed_hub_url_names_the_form(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_hub_url(url)


def test_hf_urls_open_the_hub_store_not_fsspec(hub_server: HubServer) -> None:  # noqa: F811
    assert isinstance(open_store("hf://datasets/org/ds"), HubStore)


def test_the_revision_is_pinned_to_a_commit_on_first_use(hub_server: HubServer) -> None:  # noqa: F811
    first = dataset(hub_server, ref=PARQUET)
    store = open_store("hf://datasets/org/ds@refs%2Fconvert%2Fparquet/default")
    assert isinstance(store, HubStore)
    assert store.pinned_url == f"hf://datasets/org/ds@{first}/default"
    hub_server.commit("org/ds", {"default/train/meta.json": b"changed"}, ref=PARQUET)

    assert store.read_bytes("train/meta.json") == SMALL  # still the first commit
    copy = pickle.loads(pickle.dumps(store))
    assert copy.read_bytes("train/meta.json") == SMALL
    assert len(hub_server.requests_to("/revision/")) == 1  # resolved once; the copy carried the commit
    assert open_store(store.pinned_url).read_bytes("train/meta.json") == SMALL  # a sha needs no resolving
    assert len(hub_server.requests_to("/revision/")) == 1
    assert open_store("hf://datasets/org/ds@refs/convert/parquet/default").read_bytes("train/meta.json") == b"changed"


def test_listing_pages_through_the_tree_at_the_commit(hub_server: HubServer) -> None:  # noqa: F811
    hub_server.page_size = 2
    files = {f"data/part-{number:02d}.parquet": b"x" for number in range(5)}
    hub_server.commit("org/ds", {**files, "data/sub/deep.parquet": b"y", "other.txt": b"z"})
    store = open_store("hf://datasets/org/ds/data")
    assert store.list() == [*(key.removeprefix("data/") for key in files), "sub/deep.parquet"]
    assert store.list("sub/") == ["sub/deep.parquet"]
    assert store.list("part-04") == ["part-04.parquet"]
    assert store.list("absent/") == []
    assert len(hub_server.requests_to("/tree/")) >= 4  # several pages


def test_ranged_reads_return_exact_bytes_and_object_info(hub_server: HubServer, tmp_path: Path) -> None:  # noqa: F811
    commit = dataset(hub_server)
    store = open_store("hf://datasets/org/ds/default/train")
    assert store.read_range("0000.parquet", 0, len(LARGE)) == LARGE  # type: ignore[attr-defined]
    assert store.read_range("0000.parquet", 100, 4321) == LARGE[100:4321]  # type: ignore[attr-defined]
    assert store.read_range("meta.json", 2, 7) == SMALL[2:7]  # type: ignore[attr-defined]
    info = store.object_info("0000.parquet")  # type: ignore[attr-defined]
    assert info.size == len(LARGE) and info.identity == store.identity("0000.parquet")
    assert f"commit={commit}" in info.identity and "etag=" in info.identity
    assert store.object_info("meta.json").size == len(SMALL)  # type: ignore[attr-defined]
    assert store.download("0000.parquet", tmp_path / "whole") == len(LARGE)
    assert (tmp_path / "whole").read_bytes() == LARGE
    assert store.exists("meta.json") and not store.exists("absent.json")
    ranges = [request.range for request in hub_server.requests_to("/blobs/")]
    assert ranges == [f"bytes=0-{len(LARGE) - 1}", "bytes=100-4320", None]  # the CDN got each range, then the download
    with pytest.raises(RemoteNotFoundError, match=r"0001\.parquet.*EntryNotFound.*check the path"):
        store.read_range("0001.parquet", 0, 4)  # type: ignore[attr-defined]
    with pytest.raises(StorageError, match=r"read-only Hub store"):
        store.upload(tmp_path / "whole", "new.parquet")


def test_a_missing_repo_or_revision_is_not_found(hub_server: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    dataset(hub_server)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with pytest.raises(RemoteNotFoundError, match=r"org/absent.*RepoNotFound.*check ORG/NAME"):
        open_store("hf://datasets/org/absent").list()
    with pytest.raises(RemoteNotFoundError, match=r"RevisionNotFound.*check the revision \('v9'\)"):
        open_store("hf://datasets/org/ds@v9").read_bytes("README.md")


def test_a_private_repo_without_a_token_is_access_denied_with_the_fix(hub_server: HubServer) -> None:  # noqa: F811
    hub_server.token = TOKEN
    dataset(hub_server, private=True)
    with pytest.raises(RemoteAccessDeniedError, match=r"HTTP 401.*no token was sent.*private or gated; set HF_TOKEN"):
        open_store("hf://datasets/org/ds").read_bytes("README.md")


def test_a_gated_dataset_whose_conditions_are_not_accepted_names_the_page(
    hub_server: HubServer, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    hub_server.token = TOKEN
    dataset(hub_server)
    hub_server.repos["org/ds"].gated = True
    with pytest.raises(RemoteAccessDeniedError, match=r"HTTP 401 GatedRepo.*no token was sent.*set HF_TOKEN"):
        open_store("hf://datasets/org/ds").read_bytes("README.md")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with pytest.raises(RemoteAccessDeniedError, match=rf"gated; accept its conditions at {hub_server.endpoint_url}/datasets/org/ds"):
        open_store("hf://datasets/org/ds").read_bytes("README.md")
    hub_server.repos["org/ds"].gate_accepted = True
    assert open_store("hf://datasets/org/ds").read_bytes("README.md") == b"# ds"


def test_the_token_is_sent_yet_absent_from_errors_and_debug_logs(
    hub_server: HubServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    as_in_a_fresh_process(monkeypatch)
    monkeypatch.setattr(constants, "HF_DEBUG", True)  # huggingface_hub logs each request as a curl command
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="huggingface_hub")
    hub_server.token = TOKEN
    dataset(hub_server, private=True)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    store = open_store("hf://datasets/org/ds/default/train")
    assert store.read_range("0000.parquet", 0, 10) == LARGE[:10]  # type: ignore[attr-defined]
    hub_requests = [request for request in hub_server.requests if "/blobs/" not in request.path]
    assert {request.authorization for request in hub_requests} == {f"Bearer {TOKEN}"}
    assert {request.authorization for request in hub_server.requests_to("/blobs/")} == {None}  # not to the CDN
    with pytest.raises(RemoteNotFoundError) as missing:
        store.read_range("absent.parquet", 0, 4)  # type: ignore[attr-defined]
    hub_server.throttle(1, path_contains="/resolve/")
    with pytest.raises(ThrottledError) as throttled:
        store.object_info("0000.parquet")  # type: ignore[attr-defined]
    assert any("curl" in text for text in log_texts(caplog.records))
    for text in (chain_text(missing.value), chain_text(throttled.value), repr(store), *log_texts(caplog.records)):
        assert_no_secret(TOKEN, text)


def test_the_token_file_and_the_token_option_are_read(hub_server: HubServer) -> None:  # noqa: F811
    hub_server.token = TOKEN
    dataset(hub_server, private=True)
    Path(constants.HF_TOKEN_PATH).write_text(TOKEN)  # where 'hf auth login' writes it
    assert open_store("hf://datasets/org/ds").read_bytes("README.md") == b"# ds"
    Path(constants.HF_TOKEN_PATH).unlink()
    assert open_store("hf://datasets/org/ds", token=TOKEN).read_bytes("README.md") == b"# ds"
    with pytest.raises(RemoteAccessDeniedError, match=r"the token sent has no access"):
        open_store("hf://datasets/org/ds", token="hf_" + "x" * 34).read_bytes("README.md")


def test_a_429_with_ratelimit_headers_is_waited_out(hub_server: HubServer) -> None:  # noqa: F811
    dataset(hub_server)
    store = open_store("hf://datasets/org/ds/default/train")
    store.read_bytes("meta.json")  # the commit resolved, so only ranged reads go below
    hub_server.throttle(2, reset_seconds=1, path_contains="/resolve/")
    policy = RetryPolicy(attempts=1, timeout=10.0, throttle_deadline=30.0)
    data = call_with_retries(
        lambda: store.read_range("meta.json", 0, 5),  # type: ignore[attr-defined]
        policy,
        describe="ranged read of meta.json",
    )
    assert data == SMALL[:5]
    reads = [request for request in hub_server.requests_to("/resolve/") if request.range == "bytes=0-4"]
    assert [request.status for request in reads] == [429, 429, 206]
    # By the server's own clock: each retry came no sooner than the RateLimit header's t=1 asked.
    assert reads[1].at >= reads[0].at + 1.0 and reads[2].at >= reads[1].at + 1.0


def test_a_bare_hub_token_is_redacted_wherever_it_appears() -> None:
    from stream_plugin.redaction import redact

    assert redact(f"token {TOKEN} in text") == "token hf_*** in text"
    assert TOKEN not in redact(f"Authorization: Bearer {TOKEN}")


def test_an_mds_dataset_on_the_hub_reads_as_a_remote(hub_server: HubServer, tmp_path: Path) -> None:  # noqa: F811
    import numpy as np

    from stream_plugin import MDSWriter, StreamingDataset

    with MDSWriter(out=str(tmp_path / "mds"), columns={"id": "int64"}, size_limit=1 << 10) as writer:
        for number in range(300):
            writer.write({"id": np.int64(number)})
    files = {path.relative_to(tmp_path / "mds").as_posix(): path.read_bytes() for path in (tmp_path / "mds").iterdir()}
    assert len(files) > 3  # index.json and several shards
    hub_server.commit("org/mds", files)
    dataset = StreamingDataset(remote="hf://datasets/org/mds", local=str(tmp_path / "cache"), batch_size=4)
    assert sorted(int(sample["id"]) for sample in dataset) == list(range(300))
