"""Credentials passed the way users pass them: boto3's (and litdata's) option names for S3, an unknown
option's error that lists the options that work, one name per setting, and an Azure SAS token in the
URL. Each secret stays out of the error it causes."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.azure_sas import container_sas, signature_forms, with_wrong_signature
from support.azure_server import ACCOUNT, AzureContainer
from support.datasets import write_ids
from support.s3_server import S3Bucket
from support.secret_checks import assert_no_secrets, chain_text, read_ids

from stream_plugin.errors import ConfigError
from stream_plugin.storage import RemoteAccessDeniedError, S3Store, open_store

SAMPLES = 60
ACCESS_KEY_ID = "AKIDOPTIONSTEST"
S3_SECRET = "s3-Option-Secret-4a7e0c21"
S3_TOKEN = "s3-Option-Token-d93b61f0"


@pytest.fixture
def dataset_folder(tmp_path: Path) -> Path:
    return write_ids(tmp_path / "source", range(SAMPLES), size_limit=1 << 11)


def test_s3_takes_boto3_option_names(s3_bucket: S3Bucket, dataset_folder: Path, tmp_path: Path) -> None:
    s3_bucket.upload_folder(dataset_folder, "ds")
    options = {
        "endpoint_url": s3_bucket.endpoint_url,
        "aws_access_key_id": ACCESS_KEY_ID,
        "aws_secret_access_key": S3_SECRET,
        "aws_session_token": S3_TOKEN,
        "region_name": "eu-west-1",
    }
    store = open_store(s3_bucket.url("ds"), **options)
    assert isinstance(store, S3Store)
    sent: list[dict[str, str]] = []  # the headers of each request, as signed (botocore's public event hook)
    store.client().meta.events.register(
        "before-send.s3", lambda request, **_: sent.append({k: str(v) for k, v in request.headers.items()})
    )
    assert store.read_bytes("index.json")
    (headers,) = sent
    assert f"Credential={ACCESS_KEY_ID}/" in headers["Authorization"]
    assert "/eu-west-1/s3/aws4_request" in headers["Authorization"]
    assert headers["X-Amz-Security-Token"] in (S3_TOKEN, f"b'{S3_TOKEN}'")
    assert read_ids(s3_bucket.url("ds"), tmp_path / "cache", options)[1] == list(range(SAMPLES))


def test_an_unknown_s3_option_lists_the_options_that_work(s3_bucket: S3Bucket) -> None:
    with pytest.raises(ConfigError) as raised:
        open_store(s3_bucket.url("ds"), aws_secret_key=S3_SECRET, endpoint_url=s3_bucket.endpoint_url)
    message = str(raised.value)
    assert "aws_secret_key" in message
    for name in (
        "access_key_id",
        "aws_access_key_id",
        "secret_access_key",
        "aws_secret_access_key",
        "region_name",
    ):
        assert name in message
    assert "environ" not in message  # a test hook, not an option
    assert_no_secrets((S3_SECRET,), chain_text(raised.value))


@pytest.mark.parametrize(
    ("ours", "boto3_name"),
    [
        ("access_key_id", "aws_access_key_id"),
        ("secret_access_key", "aws_secret_access_key"),
        ("session_token", "aws_session_token"),
        ("region", "region_name"),
    ],
)
def test_an_s3_option_under_both_names_is_refused(ours: str, boto3_name: str, s3_bucket: S3Bucket) -> None:
    pair = {"access_key_id": ACCESS_KEY_ID, "secret_access_key": S3_TOKEN}
    options = {**pair, ours: S3_SECRET, boto3_name: S3_SECRET + "-other"}
    with pytest.raises(ConfigError, match=rf"expected '{ours}' or '{boto3_name}', found both") as raised:
        open_store(s3_bucket.url("ds"), endpoint_url=s3_bucket.endpoint_url, **options)
    assert_no_secrets((S3_SECRET, S3_TOKEN), chain_text(raised.value))


def test_azure_sas_in_the_url_reads_the_dataset(
    azure_container: AzureContainer, dataset_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    azure_container.upload_folder(dataset_folder, "ds")
    options = {"account_name": ACCOUNT, "endpoint_url": azure_container.server.endpoint_url}
    sas = container_sas(azure_container)
    dataset, ids = read_ids(f"{azure_container.url('ds')}?{sas}", tmp_path / "cache", options)
    assert ids == list(range(SAMPLES))
    assert_no_secrets(signature_forms(sas), repr(dataset.streams[0]))
    with pytest.raises(RemoteAccessDeniedError):  # without the SAS, the container is private
        read_ids(azure_container.url("ds"), tmp_path / "other", options)


def test_azure_wrong_sas_signature_is_access_denied_without_the_signature(
    azure_container: AzureContainer, dataset_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    azure_container.upload_folder(dataset_folder, "ds")
    options = {"account_name": ACCOUNT, "endpoint_url": azure_container.server.endpoint_url}
    wrong = with_wrong_signature(container_sas(azure_container))
    with pytest.raises(
        RemoteAccessDeniedError, match=r"(?s)Expected access to .*azure://.*check the credentials"
    ) as raised:
        read_ids(f"{azure_container.url('ds')}?{wrong}", tmp_path / "cache", options)
    assert_no_secrets(signature_forms(wrong), chain_text(raised.value))
