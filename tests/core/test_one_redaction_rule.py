"""The redaction rule is applied where every message passes, read from the source and checked live.

- every logger of the package and the integrations comes from ``redaction.get_logger`` (so it carries
  the redacting filter); no module calls ``logging.getLogger`` but ``redaction`` itself;
- every ``repr`` a store defines shows its URL through ``redact_url``;
- benchmark reports are written through ``redact``.
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from stream_plugin.errors import ConfigError, StorageError
from stream_plugin.redaction import HIDDEN, REDACTED_LIBRARY_LOGGERS, get_logger, redact
from stream_plugin.storage import open_store

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    [*(ROOT / "stream_plugin").rglob("*.py"), *(ROOT / "integrations").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
)
SECRET = "s3cr3t-VALUE-7"


def _calls_get_logger_of_logging(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "getLogger"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "logging"
        for node in ast.walk(tree)
    )


def test_every_package_logger_comes_from_get_logger() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in SOURCES
        if path.name != "redaction.py"
        and path.parts[-2:] != ("stream_plugin", "__init__.py")  # adds the NullHandler to the root logger only
        and "benchmarks" not in path.relative_to(ROOT).parts
        and _calls_get_logger_of_logging(ast.parse(path.read_text(), str(path)))
    ]
    assert offenders == [], f"use stream_plugin.redaction.get_logger instead of logging.getLogger in {offenders}"


def test_a_package_logger_redacts_its_records(caplog: pytest.LogCaptureFixture) -> None:
    logger = get_logger("stream_plugin.some.module")
    with caplog.at_level(logging.DEBUG, logger="stream_plugin"):
        logger.debug("fetched %s", f"https://alice:{SECRET}@host/ds?token={SECRET}")
    assert caplog.records and SECRET not in caplog.text
    assert f"alice:{HIDDEN}@host/ds?token={HIDDEN}" in caplog.text


@pytest.mark.parametrize(
    "url",
    [
        f"http://alice:{SECRET}@127.0.0.1:9/ds",
        f"https://host/ds?token={SECRET}",
        f"s3://bucket/ds?X-Amz-Signature={SECRET}",
        f"azure://container/ds?sv=2024&sig={SECRET}",
    ],
)
def test_store_repr_hides_the_secret(url: str) -> None:
    options = {"account_name": "devstoreaccount1"} if url.startswith("azure") else {}
    store = open_store(url, **options)
    assert SECRET not in repr(store) and HIDDEN in repr(store)


def test_an_error_made_while_handling_another_scrubs_that_ones_message() -> None:
    with pytest.raises(StorageError) as caught:
        try:
            raise OSError(f"Max retries exceeded with url: /ds/index.json?token={SECRET}")
        except OSError as error:
            raise StorageError(f"Expected to read https://host/ds?token={SECRET}, found {error}") from error
    assert SECRET not in str(caught.value)
    assert SECRET not in str(caught.value.__cause__)


def test_s3_takes_boto3_option_names_but_not_both_forms() -> None:
    store = open_store("s3://bucket/ds", aws_access_key_id="AKIA1", aws_secret_access_key=SECRET, region_name="eu-west-1")
    assert (store.access_key_id, store.secret_access_key, store.region) == ("AKIA1", SECRET, "eu-west-1")  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"expected 'region' or 'region_name', found both"):
        open_store("s3://bucket/ds", region="us-east-1", region_name="eu-west-1")


def test_an_unknown_option_error_lists_the_store_options() -> None:
    with pytest.raises(ConfigError) as caught:
        open_store("s3://bucket/ds", aws_secret=SECRET)
    message = str(caught.value)
    assert "unknown option(s) ['aws_secret']" in message
    for name in ("access_key_id", "aws_access_key_id", "secret_access_key", "aws_secret_access_key", "endpoint_url"):
        assert name in message


def test_benchmark_reports_pass_the_rule() -> None:
    for name in ("report.py", "harness.py"):
        source = (ROOT / "benchmarks" / name).read_text()
        assert "redact(" in source, f"benchmarks/{name} writes a report without redact()"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"x-amz-security-token:{SECRET}", "x-amz-security-token:***"),
        (f"{{'X-Amz-Security-Token': b'{SECRET}', 'Host': 'h'}}", "{'X-Amz-Security-Token': b'***', 'Host': 'h'}"),
        (f"Authorization: Basic {SECRET}", "Authorization: Basic ***"),
        (f"authorization: bearer {SECRET}", "authorization: bearer ***"),
        ("started at 12:00: ok", "started at 12:00: ok"),
    ],
)
def test_secret_headers_as_libraries_log_them_are_hidden(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_opening_any_store_filters_the_sdk_request_logs() -> None:
    for name in REDACTED_LIBRARY_LOGGERS:
        logging.getLogger(name).filters.clear()
    open_store("s3://bucket/ds")
    assert all(logging.getLogger(name).filters for name in REDACTED_LIBRARY_LOGGERS)


class _MessageError(Exception):
    """An SDK-style error whose ``__str__`` reads an attribute, not ``args``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def test_a_chained_error_whose_str_ignores_args_is_scrubbed_too() -> None:
    with pytest.raises(StorageError) as caught:
        try:
            raise _MessageError(f"GET https://host/ds/index.json?sig={SECRET} failed")
        except _MessageError as error:
            raise StorageError("Expected to read https://host/ds, found an SDK error") from error
    assert SECRET not in str(caught.value.__cause__)
