"""The ``stream-plugin`` command with a secret in its arguments or environment: ``inspect``, ``verify`` and
``convert``, succeeding and failing, print the secret on neither stdout nor stderr.

Run as a real subprocess (as a user runs it), against loopback servers that demand the credential.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.auth_servers import AuthServer, basic_authorization, serve_basic_auth, serve_query_token
from support.azure_sas import container_sas, signature_forms
from support.azure_server import KEY, AzureContainer, AzureServer
from support.datasets import write_ids
from support.s3_server import S3Bucket
from support.secret_checks import assert_no_secrets

SCRIPT = Path(sys.executable).with_name("stream-plugin")
SAMPLES = 60
USER = "alice"
PASSWORD = "pw-Cli-Basic-41d7e2c9"
WRONG_PASSWORD = "pw-Cli-Wrong-a81f03b6"
TOKEN = "tok-Cli-Query-5e2b9d10"
WRONG_TOKEN = "tok-Cli-Wrong-c37a6f84"
HTTP_SECRETS = (
    PASSWORD,
    WRONG_PASSWORD,
    TOKEN,
    WRONG_TOKEN,
    basic_authorization(USER, PASSWORD)[6:],
    basic_authorization(USER, WRONG_PASSWORD)[6:],
)
S3_SECRET = "s3-Cli-Secret-0b94e7d2"
S3_TOKEN = "s3-Cli-Session-7c21a5f8"
WRONG_KEY = KEY[:-8] + "AAAAAAA="


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )


def assert_quiet_about(secrets: tuple[str, ...], result: subprocess.CompletedProcess[str]) -> None:
    assert_no_secrets(secrets, result.stdout, result.stderr)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    write_ids(tmp_path / "site" / "ds", range(SAMPLES), size_limit=1 << 11)
    return tmp_path / "site"


@pytest.fixture
def basic_site(site: Path) -> Iterator[AuthServer]:
    with serve_basic_auth(site, USER, PASSWORD) as server:
        yield server


@pytest.fixture
def token_site(site: Path) -> Iterator[AuthServer]:
    with serve_query_token(site, TOKEN) as server:
        yield server


def userinfo_url(server: AuthServer, password: str = PASSWORD) -> str:
    return f"http://{USER}:{password}@{server.host}:{server.port}/ds"


def token_url(server: AuthServer, token: str = TOKEN) -> str:
    return f"http://{server.host}:{server.port}/ds?token={token}"


def test_cli_inspect_and_verify_with_userinfo_show_no_password(basic_site: AuthServer) -> None:
    inspected = run_cli("inspect", userinfo_url(basic_site), "--shards")
    assert inspected.returncode == 0, inspected.stderr
    assert f"dataset: http://{USER}:***@{basic_site.host}:{basic_site.port}/ds" in inspected.stdout
    verified = run_cli("verify", userinfo_url(basic_site))  # with its progress display
    assert verified.returncode == 0, verified.stderr
    assert f"{SAMPLES} samples decoded" in verified.stdout
    assert basic_site.seen() and all(request.granted for request in basic_site.seen())
    for result in (inspected, verified):
        assert_quiet_about(HTTP_SECRETS, result)


def test_cli_inspect_and_verify_with_a_query_token_show_no_token(token_site: AuthServer) -> None:
    inspected = run_cli("inspect", token_url(token_site), "--json")
    assert inspected.returncode == 0, inspected.stderr
    report = json.loads(inspected.stdout)
    assert (report["dataset"], report["samples"]) == (
        f"http://{token_site.host}:{token_site.port}/ds?token=***",
        SAMPLES,
    )
    verified = run_cli("verify", token_url(token_site), "--no-progress")
    assert verified.returncode == 0, verified.stderr
    assert f"{SAMPLES} samples decoded" in verified.stdout
    assert token_site.seen() and all(request.granted for request in token_site.seen())
    for result in (inspected, verified):
        assert_quiet_about(HTTP_SECRETS, result)


def test_cli_refused_credentials_fail_without_showing_them(
    basic_site: AuthServer, token_site: AuthServer
) -> None:
    results = [
        run_cli("inspect", userinfo_url(basic_site, WRONG_PASSWORD)),
        run_cli("verify", token_url(token_site, WRONG_TOKEN), "--no-progress"),
    ]
    for result in results:
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert "error: Expected access to" in result.stderr
        assert_quiet_about(HTTP_SECRETS, result)


def test_cli_unreachable_host_fails_without_showing_the_secret(
    basic_site: AuthServer, tmp_path: Path
) -> None:
    with serve_query_token(tmp_path, TOKEN) as gone:
        url = token_url(gone)
    result = run_cli("inspect", url)  # the server stopped: nothing listens on its port now
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert_quiet_about(HTTP_SECRETS, result)


def rows_file(tmp_path: Path) -> Path:
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps({"text": f"row {i}", "label": i}) + "\n" for i in range(200)))
    return source


def test_cli_convert_with_s3_secrets_in_the_environment_shows_none(
    s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    env = {
        "AWS_ACCESS_KEY_ID": "AKIDCLISECRETS",
        "AWS_SECRET_ACCESS_KEY": S3_SECRET,
        "AWS_SESSION_TOKEN": S3_TOKEN,
        "S3_ENDPOINT_URL": s3_bucket.endpoint_url,
    }
    source = rows_file(tmp_path)
    converted = run_cli("convert", str(source), s3_bucket.url("converted"), "--size-limit", "4kb", env=env)
    assert converted.returncode == 0, converted.stderr
    assert "converted/index.json" in s3_bucket.keys("converted/")
    with s3_bucket.server.enforce_auth():  # moto now refuses these keys
        refused = run_cli("convert", str(source), s3_bucket.url("refused"), "--no-progress", env=env)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    for result in (converted, refused):
        assert_quiet_about((S3_SECRET, S3_TOKEN), result)


def test_cli_convert_to_an_azure_url_with_a_sas_shows_no_signature_or_key(
    azure_container: AzureContainer, tmp_path: Path
) -> None:
    server: AzureServer = azure_container.server
    sas = container_sas(azure_container, write=True)
    secrets = (*signature_forms(sas), KEY, WRONG_KEY)
    source = rows_file(tmp_path)
    url = f"{azure_container.url('converted')}?{sas}"
    converted = run_cli("convert", str(source), url, "--size-limit", "4kb")
    assert converted.returncode == 0, converted.stderr
    assert "wrote 200 samples to azure://" in converted.stdout
    assert "converted/index.json" in azure_container.keys("converted/")
    verified = run_cli("verify", url, "--no-progress")
    assert verified.returncode == 0, verified.stderr
    wrong_key = {"AZURE_STORAGE_CONNECTION_STRING": server.connection_string().replace(KEY, WRONG_KEY)}
    refused = run_cli("convert", str(source), azure_container.url("refused"), "--no-progress", env=wrong_key)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    for result in (converted, verified, refused):
        assert_quiet_about(secrets, result)
