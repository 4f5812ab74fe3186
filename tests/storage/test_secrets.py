"""Secrets in an http(s) remote: userinfo is sent as Basic auth, a query token reaches every object, and
neither appears in any exception chain, log record (DEBUG included, urllib3's too), output, ``repr()``,
resume state or file under ``local``; on a good read and on every error path (unreachable, 401/403,
404, a truncated body, a remote changed under a warm cache).

The servers are real loopback servers guarding a folder (``support.auth_servers``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.auth_servers import AuthServer, basic_authorization, serve_basic_auth, serve_query_token
from support.datasets import write_ids
from support.fault_proxy import FaultProxy, FaultRule
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
from stream_plugin.storage import HttpStore, RemoteAccessDeniedError, RemoteNotFoundError, open_store

SAMPLES = 60
USER = "alice"
PASSWORD = "pw-Basic-7f3a9c1e"
WRONG_PASSWORD = "pw-Wrong-55b0d2aa"
TOKEN = "tok-Query-0c9e4b77"
WRONG_TOKEN = "tok-Wrong-9d1f6a03"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder to serve, holding a small dataset of several shards under ``ds/``."""
    write_ids(tmp_path / "site" / "ds", range(SAMPLES), size_limit=1 << 11)
    return tmp_path / "site"


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> pytest.LogCaptureFixture:
    """Every record of every logger (ours, urllib3's, ...) at DEBUG and above."""
    as_in_a_fresh_process(monkeypatch)
    caplog.set_level(logging.DEBUG)
    return caplog


@dataclass(frozen=True)
class Guard:
    """One way a user puts the credential into an http(s) remote."""

    name: str
    serve: Callable[[Path], AbstractContextManager[AuthServer]]
    remote: Callable[[str, str, bool], str]  # (host:port, path, right credential?) -> remote URL
    secrets: tuple[str, ...]  # every secret the remotes below carry, right and wrong

    def __repr__(self) -> str:
        return self.name


def userinfo_remote(address: str, path: str, right: bool) -> str:
    return f"http://{USER}:{PASSWORD if right else WRONG_PASSWORD}@{address}/{path}"


def token_remote(address: str, path: str, right: bool) -> str:
    return f"http://{address}/{path}?token={TOKEN if right else WRONG_TOKEN}"


GUARDS = (
    Guard(
        "userinfo",
        lambda folder: serve_basic_auth(folder, USER, PASSWORD),
        userinfo_remote,
        (
            PASSWORD,
            WRONG_PASSWORD,
            basic_authorization(USER, PASSWORD)[6:],
            basic_authorization(USER, WRONG_PASSWORD)[6:],
        ),
    ),
    Guard(
        "query-token",
        lambda folder: serve_query_token(folder, TOKEN),
        token_remote,
        (TOKEN, WRONG_TOKEN),
    ),
)


@pytest.fixture(params=GUARDS, ids=[guard.name for guard in GUARDS])
def guarded(request: pytest.FixtureRequest, site: Path) -> Iterator[tuple[Guard, AuthServer]]:
    guard: Guard = request.param
    with guard.serve(site) as server:
        yield guard, server


def address_of(server: AuthServer) -> str:
    return f"{server.host}:{server.port}"


# --- reading works the way users pass credentials ---------------------------------------------------


def test_http_userinfo_is_sent_as_basic_auth(
    site: Path, tmp_path: Path, debug_logs: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    with serve_basic_auth(site, USER, PASSWORD) as server:
        dataset, ids = read_ids(userinfo_remote(address_of(server), "ds", True), tmp_path / "cache")
    assert ids == list(range(SAMPLES))
    seen = server.seen()
    assert seen and all(request.granted for request in seen)
    assert all(request.header("Authorization") == basic_authorization(USER, PASSWORD) for request in seen)
    assert all(PASSWORD not in request.line for request in seen)  # in the header, never in the request line
    served = {f"/ds/{path.name}" for path in (site / "ds").iterdir()}
    assert {request.path for request in seen if request.method == "GET"} == served
    secrets = GUARDS[0].secrets
    assert_no_secrets(
        secrets, *seen_by_anyone(debug_logs, capfd, tmp_path / "cache", *dataset_texts(dataset, SAMPLES // 2))
    )


def test_http_query_token_reaches_every_object(
    site: Path, tmp_path: Path, debug_logs: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    with serve_query_token(site, TOKEN) as server:
        dataset, ids = read_ids(token_remote(address_of(server), "ds", True), tmp_path / "cache")
    assert ids == list(range(SAMPLES))
    seen = server.seen()
    assert seen and all(request.granted for request in seen)
    assert all(request.path.endswith(f"?token={TOKEN}") for request in seen)
    served = {f"/ds/{path.name}?token={TOKEN}" for path in (site / "ds").iterdir()}
    assert {request.path for request in seen if request.method == "GET"} == served
    assert_no_secrets(
        (TOKEN,),
        *seen_by_anyone(debug_logs, capfd, tmp_path / "cache", *dataset_texts(dataset, SAMPLES // 2)),
    )


def test_http_query_is_carried_to_each_key_of_the_store(site: Path) -> None:
    with serve_query_token(site, TOKEN) as server:
        store = open_store(token_remote(address_of(server), "ds", True))
        assert isinstance(store, HttpStore)
        assert json.loads(store.read_bytes("index.json", timeout=10))["version"] == 2
        assert store.exists("index.json")
        assert not store.exists("absent.json")
        assert SAMPLES > 0 and store.download("shard.00000.mds", site / "copy", timeout=10) > 0
    assert {request.path for request in server.seen()} == {
        f"/ds/index.json?token={TOKEN}",
        f"/ds/absent.json?token={TOKEN}",
        f"/ds/shard.00000.mds?token={TOKEN}",
    }
    assert TOKEN not in repr(store)


def test_http_store_without_the_credential_is_refused(site: Path, tmp_path: Path) -> None:
    """The servers really guard the folder: the tests above pass only because the credential was sent."""
    with serve_basic_auth(site, USER, PASSWORD) as basic, serve_query_token(site, TOKEN) as token:
        for server in (basic, token):
            with pytest.raises(RemoteAccessDeniedError, match=r"found HTTP 40[13]"):
                open_store(f"{server.url}/ds").read_bytes("index.json", timeout=10)
            assert server.seen()[-1].granted is False


# --- every error path: the secret stays out of the chain, the logs and the output -------------------


def test_http_unreachable_host_keeps_the_secret_out(
    guarded: tuple[Guard, AuthServer],
    tmp_path: Path,
    debug_logs: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    guard, _ = guarded
    remote = guard.remote(f"127.0.0.1:{closed_port()}", "ds", True)
    with pytest.raises(StorageError, match="Connection refused|NewConnectionError") as raised:
        read_ids(remote, tmp_path / "cache")
    assert_no_secrets(
        guard.secrets, chain_text(raised.value), *seen_by_anyone(debug_logs, capfd, tmp_path / "cache")
    )


def test_http_wrong_credential_is_access_denied_keeping_the_secret_out(
    guarded: tuple[Guard, AuthServer],
    tmp_path: Path,
    debug_logs: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    guard, server = guarded
    with pytest.raises(RemoteAccessDeniedError, match=r"found HTTP 40[13]") as raised:
        read_ids(guard.remote(address_of(server), "ds", False), tmp_path / "cache")
    assert server.count == 1  # refused at once, never retried
    assert_no_secrets(
        guard.secrets, chain_text(raised.value), *seen_by_anyone(debug_logs, capfd, tmp_path / "cache")
    )


def test_http_missing_index_is_not_found_keeping_the_secret_out(
    guarded: tuple[Guard, AuthServer],
    tmp_path: Path,
    debug_logs: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    guard, server = guarded
    with pytest.raises(RemoteNotFoundError, match=r"nothing-here/index\.json.*HTTP 404") as raised:
        read_ids(guard.remote(address_of(server), "nothing-here", True), tmp_path / "cache")
    assert_no_secrets(
        guard.secrets, chain_text(raised.value), *seen_by_anyone(debug_logs, capfd, tmp_path / "cache")
    )


def test_http_truncated_shard_keeps_the_secret_out(
    guarded: tuple[Guard, AuthServer],
    tmp_path: Path,
    debug_logs: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    guard, server = guarded
    with FaultProxy((server.host, server.port), [FaultRule("truncate", path_contains="shard")]) as proxy:
        remote = guard.remote(f"127.0.0.1:{proxy.port}", "ds", True)
        with pytest.raises(StorageError, match="IncompleteRead|truncated") as raised:
            read_ids(remote, tmp_path / "cache")
        assert proxy.injected["truncate"] >= 1
    assert_no_secrets(
        guard.secrets, chain_text(raised.value), *seen_by_anyone(debug_logs, capfd, tmp_path / "cache")
    )


def test_http_remote_changed_under_a_warm_cache_keeps_the_secret_out(
    guarded: tuple[Guard, AuthServer],
    site: Path,
    tmp_path: Path,
    debug_logs: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    guard, server = guarded
    remote = guard.remote(address_of(server), "ds", True)
    _, ids = read_ids(remote, tmp_path / "cache")
    assert ids == list(range(SAMPLES))
    index = site / "ds" / "index.json"
    index.write_bytes(index.read_bytes() + b"\n")  # rewritten: a new size and Last-Modified
    stamp = index.stat().st_mtime + 100
    os.utime(index, (stamp, stamp))
    with pytest.raises(RemoteChangedError, match="found it rewritten") as raised:
        read_ids(remote, tmp_path / "cache")
    assert_no_secrets(
        guard.secrets, chain_text(raised.value), *seen_by_anyone(debug_logs, capfd, tmp_path / "cache")
    )
