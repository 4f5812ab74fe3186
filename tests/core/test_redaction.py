"""The one redaction rule (``stream_plugin.redaction``): what it hides, what it keeps, and where it runs."""

from __future__ import annotations

import logging
import sys
import traceback

import pytest

from stream_plugin.errors import StorageError
from stream_plugin.redaction import (
    HIDDEN,
    RedactingFilter,
    RedactingWriter,
    get_logger,
    redact,
    redact_url,
    scrub_exception,
)

SECRET = "s3cr3t-Value-42"


def test_redact_url_hides_password_and_every_query_value() -> None:
    url = f"https://alice:{SECRET}@example.com:8443/data/ds?token={SECRET}&part=7&X-Amz-Signature=abc"
    assert (
        redact_url(url) == "https://alice:***@example.com:8443/data/ds?token=***&part=***&X-Amz-Signature=***"
    )


def test_redact_url_keeps_user_host_path_and_parameter_names() -> None:
    redacted = redact_url(f"http://bob:{SECRET}@10.0.0.1/a/b/index.json?sv=2022-11-02&sig={SECRET}")
    assert redacted == "http://bob:***@10.0.0.1/a/b/index.json?sv=***&sig=***"


def test_redact_url_hides_a_percent_encoded_password_and_a_bare_query() -> None:
    assert redact_url("http://alice:p%40ss%3Aword@host/ds") == "http://alice:***@host/ds"
    assert SECRET not in redact_url(f"https://host/ds?{SECRET}")


@pytest.mark.parametrize(
    "url",
    [
        "s3://bucket/prefix/index.json",
        "http://alice@host/ds",  # a user name alone is not a secret
        "azure://container/prefix",
        "gs://bucket/a/b",
        "/local/path/ds",
        "file:///local/path/ds",
    ],
)
def test_a_url_without_password_or_query_is_unchanged(url: str) -> None:
    assert redact_url(url) == url
    assert redact(url) == url


@pytest.mark.parametrize(
    "name",
    [
        "X-Amz-Signature",
        "X-Amz-Credential",
        "X-Amz-Security-Token",
        "X-Goog-Signature",
        "X-Goog-Credential",
        "sig",
        "se",
        "token",
        "SIG",  # names match whatever their case
    ],
)
def test_known_signature_parameters_are_never_shown(name: str) -> None:
    in_url = f"failed https://bucket.example.com/ds/index.json?{name}={SECRET}&other=1"
    in_text = f"the request carried {name}={SECRET} and failed"
    for text in (in_url, in_text):
        assert SECRET not in redact(text)
        assert f"{name}={HIDDEN}" in redact(text)


def test_a_bare_sas_token_in_text_hides_its_signature() -> None:
    sas = f"sv=2022-11-02&ss=b&srt=co&sp=rl&se=2030-01-01T00%3A00%3A00Z&sig={SECRET}%3D"
    redacted = redact(f"credential {sas} was refused")
    assert SECRET not in redacted
    assert "sig=***" in redacted
    assert "2030-01-01" not in redacted  # the expiry (se) is one of the SAS fields hidden by name


def test_a_connection_string_hides_its_account_key_and_sas() -> None:
    key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    connection = (
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={key};"
        f"BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
    )
    redacted = redact(f"cannot connect with {connection}")
    assert key not in redacted and key[:20] not in redacted
    assert "AccountKey=***" in redacted
    assert "AccountName=devstoreaccount1" in redacted  # an account name is not a secret
    sas_connection = (
        f"BlobEndpoint=http://127.0.0.1:10000/acct;SharedAccessSignature=sv=2022-11-02&sig={SECRET}"
    )
    assert SECRET not in redact(sas_connection)


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        (
            f"Expected to read https://h/ds?token={SECRET}.",
            "Expected to read https://h/ds?token=***.",
        ),
        (
            f"could not open (https://u:{SECRET}@h/ds), retrying",
            "could not open (https://u:***@h/ds), retrying",
        ),
        (
            f"urls: http://h/a?sig={SECRET}; http://h/b?token={SECRET}!",
            "urls: http://h/a?sig=***; http://h/b?token=***!",
        ),
        (
            f"'https://u:{SECRET}@h/ds/index.json'",
            "'https://u:***@h/ds/index.json'",
        ),
    ],
)
def test_urls_embedded_in_sentences_are_redacted_and_punctuation_kept(sentence: str, expected: str) -> None:
    assert redact(sentence) == expected


def test_a_path_only_request_line_with_a_query_hides_the_values() -> None:
    line = f"GET /ds/index.json?token={SECRET}&part=2 HTTP/1.1"
    assert redact(line) == "GET /ds/index.json?token=***&part=*** HTTP/1.1"
    # urllib3's DEBUG line for a request
    logged = f'http://127.0.0.1:8080 "GET /ds/shard.00000.mds?token={SECRET} HTTP/1.1" 200 4096'
    assert redact(logged) == 'http://127.0.0.1:8080 "GET /ds/shard.00000.mds?token=*** HTTP/1.1" 200 4096'


@pytest.mark.parametrize(
    "text",
    [
        f"https://alice:{SECRET}@h/ds?token={SECRET}&a=b",
        f"GET /x?sig={SECRET} HTTP/1.1",
        f"AccountKey={SECRET};AccountName=a",
        f"see (http://h/p?X-Amz-Signature={SECRET}).",
    ],
)
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once
    assert SECRET not in once


@pytest.mark.parametrize(
    "text",
    [
        "Expected 4096 bytes from s3://bucket/ds/shard.00000.mds, found 2048 (truncated body); will retry.",
        "expected size=10, found 12; regenerate the dataset",
        "write to user@example.com about it",
        "num_canonical_nodes=8 batch_size=16",
        "ratio 3/4 = 0.75",
        "",
    ],
)
def test_text_without_secrets_is_unchanged(text: str) -> None:
    assert redact(text) == text


def test_redacting_filter_redacts_a_record_with_args() -> None:
    record = logging.LogRecord(
        "stream_plugin.test",
        logging.DEBUG,
        __file__,
        1,
        "downloading %s (try %d)",
        (f"http://h/ds?token={SECRET}", 2),
        None,
    )
    assert RedactingFilter().filter(record)
    assert record.getMessage() == "downloading http://h/ds?token=*** (try 2)"


def test_redacting_filter_redacts_the_exception_of_a_record() -> None:
    try:
        try:
            raise ConnectionError(f"reset by https://u:{SECRET}@h/ds/index.json")
        except ConnectionError as inner:
            raise RuntimeError(f"GET /ds/index.json?sig={SECRET} failed") from inner
    except RuntimeError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("stream_plugin.test", logging.WARNING, __file__, 1, "failed", None, exc_info)
    assert RedactingFilter().filter(record)
    formatted = logging.Formatter().format(record)
    assert "Traceback" in formatted and "ConnectionError" in formatted
    assert SECRET not in formatted


def test_every_package_logger_redacts_what_reaches_any_handler(caplog: pytest.LogCaptureFixture) -> None:
    logger = get_logger("stream_plugin.test_redaction")
    # The package logger's own level too: an in-process CLI run earlier in the session sets it to WARNING.
    with caplog.at_level(logging.DEBUG, logger="stream_plugin"):
        logger.debug("GET %s", f"http://alice:{SECRET}@h/ds?token={SECRET}")
    assert [record.getMessage() for record in caplog.records] == ["GET http://alice:***@h/ds?token=***"]
    assert SECRET not in caplog.text


def test_scrub_exception_redacts_the_whole_chain() -> None:
    root = ValueError(f"token={SECRET}")
    middle = KeyError(f"http://u:{SECRET}@h/x")
    middle.__context__ = root
    top = RuntimeError(f"see https://h/ds?sig={SECRET}")
    top.__cause__ = middle
    scrub_exception(top)
    text = "".join(traceback.format_exception(top))
    assert SECRET not in text
    assert "sig=***" in str(top)


def test_our_errors_redact_their_message_and_the_exception_they_chain() -> None:
    try:
        try:
            raise OSError(f"connection to https://h/ds?token={SECRET} refused")
        except OSError as error:
            raise StorageError(
                f"Expected to read https://alice:{SECRET}@h/ds/index.json, found {error}"
            ) from error
    except StorageError as raised:
        caught = raised
    assert str(caught) == (
        "Expected to read https://alice:***@h/ds/index.json, found connection to https://h/ds?token=*** refused"
    )
    assert SECRET not in "".join(traceback.format_exception(caught))


def test_redacting_writer_redacts_lines_split_over_writes() -> None:
    class Sink:
        def __init__(self) -> None:
            self.text = ""

        def write(self, text: str) -> int:
            self.text += text
            return len(text)

        def flush(self) -> None:
            pass

    sink = Sink()
    writer = RedactingWriter(sink)  # type: ignore[arg-type]
    writer.write("dataset: https://alice:")
    writer.write(f"{SECRET}@h/ds?tok")
    writer.write(f"en={SECRET}\nnext line ")
    writer.write(f"sig={SECRET}")
    writer.flush()
    assert sink.text == "dataset: https://alice:***@h/ds?token=***\nnext line sig=***"
