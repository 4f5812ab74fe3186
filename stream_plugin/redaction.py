"""The one rule that keeps secrets out of every message: errors, log records, the CLI, ``repr()``.

A URL is shown with its password replaced by ``***`` and the value of every query parameter hidden
(``https://alice:***@host/ds?token=***``): signatures (``X-Amz-Signature``, ``X-Goog-Signature``,
``sig``), credentials, session tokens and SAS fields all live in the query, and a parameter we do not
know may be one too, so none is shown. A Hugging Face token (``hf_...``) is hidden wherever it
appears. Outside URLs, a ``name=value`` pair whose name is a known
secret (``sig=``, ``AccountKey=``, ``password=``, ...; a bare SAS token or a connection string) is
shown as ``name=***``.

Where the rule applies, once for everything that passes there:

- every exception of this package (``errors.StreamPluginError`` redacts its message) and the
  exception it is raised while handling, with that one's own chain (``scrub_exception``);
- every log record of this package's loggers (``get_logger``), and of the third-party loggers that
  print our request URLs (``REDACTED_LIBRARY_LOGGERS``, filtered once a store that uses them opens);
- the CLI's standard output and error (``RedactingWriter``);
- stores' and streams' ``repr()``, progress bars and the remote recorded in a cache folder.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable
from typing import TextIO
from urllib.parse import urlsplit, urlunsplit

__all__ = ["HIDDEN", "RedactingFilter", "RedactingWriter", "get_logger", "redact", "redact_url", "scrub_exception"]

HIDDEN = "***"

# Names whose value is a secret wherever a ``name=value`` pair appears (case-insensitive): signed
# URLs' signatures and credentials (S3, GCS, Azure SAS), tokens, passwords and account keys.
SECRET_NAMES: tuple[str, ...] = (
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
    "X-Goog-Signature",
    "X-Goog-Credential",
    "Signature",
    "sig",
    "se",
    "token",
    "access_token",
    "sas_token",
    "password",
    "secret",
    "secret_access_key",
    "aws_secret_access_key",
    "session_token",
    "aws_session_token",
    "account_key",
    "AccountKey",
    "SharedAccessSignature",
    "client_secret",
    "api_key",
)
_SECRET_PAIR = re.compile(
    r"(?<![\w-])(" + "|".join(re.escape(name) for name in SECRET_NAMES) + r")=([^&\s;'\",)}\]]+)",
    re.IGNORECASE,
)
# A secret HTTP header as libraries log it: ``x-amz-security-token:V`` (a canonical request),
# ``'X-Amz-Security-Token': b'V'`` (a header dict), ``Authorization: Basic V``.
_SECRET_HEADER = re.compile(
    r"\b(x-amz-security-token|x-goog-security-token|authorization|x-ms-encryption-key)"
    r"(['\"]?\s*:\s*(?:(?-i:b)?['\"])?)((?:basic|bearer)\s+)?([^'\"\s,}]+)",
    re.IGNORECASE,
)
# A Hugging Face access token wherever it appears, bare (``hf_`` and 30-odd letters and digits).
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}")
# A URL inside free text: a scheme, ``://``, then everything up to whitespace or a quote/bracket.
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>`]+")
# A path with a query but no scheme (urllib3 quotes the request line ``/ds/index.json?token=...``).
_PATH_QUERY = re.compile(r"(?<![\w:/])(/[^\s'\"<>`?]*)\?([^\s'\"<>`]+)")


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` and every query parameter's value hidden.

    The user name, host, path and parameter names stay, so the message still says which object failed.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # an unparsable URL (a bad port, an odd bracket): hide what follows the host
        return _hide_tail(url)
    netloc = parts.netloc
    if password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:{HIDDEN}@{host}"
    query = _hidden_query(parts.query)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _hidden_query(query: str) -> str:
    if not query:
        return query
    pairs = []
    for pair in query.split("&"):
        name, equals, _ = pair.partition("=")
        pairs.append(f"{name}={HIDDEN}" if equals else (HIDDEN if pair else pair))
    return "&".join(pairs)


def _hide_tail(url: str) -> str:
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].rpartition("@")[2]
    return f"{scheme}://{host}/{HIDDEN}"


def redact(text: str) -> str:
    """``text`` with every URL in it passed through ``redact_url`` and known secret pairs hidden."""
    if "hf_" in text:
        text = _HF_TOKEN.sub(f"hf_{HIDDEN}", text)
    if "=" not in text and "@" not in text and ":" not in text:
        return text  # nothing to hide: no query, no key=value pair, no userinfo, no header
    text = _URL.sub(_redact_found_url, text)
    text = _PATH_QUERY.sub(lambda found: f"{found.group(1)}?{_hidden_query(found.group(2))}", text)
    text = _SECRET_HEADER.sub(lambda found: f"{found.group(1)}{found.group(2)}{found.group(3) or ''}{HIDDEN}", text)
    return _SECRET_PAIR.sub(_hide_pair, text)


def _hide_pair(found: re.Match[str]) -> str:
    """``name=***`` for a secret pair found in text; a full stop or colon that ends it stays."""
    value = found.group(2)
    return f"{found.group(1)}={HIDDEN}{value[len(value.rstrip('.:!')) :]}"


def _redact_found_url(found: re.Match[str]) -> str:
    """A URL found in text, redacted; punctuation that ends the sentence stays outside the URL."""
    url = found.group(0)
    body = url.rstrip(".,;:!)]}")
    return redact_url(body) + url[len(body) :]


def redact_exception(error: BaseException) -> str:
    """``str(error)`` redacted (what a message may quote of a foreign exception)."""
    return redact(str(error))


_SCRUB_DEPTH = 16  # a chain is walked this far at most (a cycle or a huge chain cannot stall us)


def scrub_exception(error: BaseException | None) -> None:
    """Redact, in place, the messages of ``error`` and of the exceptions it chains.

    A third-party exception (urllib3's ``MaxRetryError`` quotes the request path with its query)
    becomes the ``__cause__`` of ours; its ``args`` are replaced by their redacted text so that a
    traceback, a log record or ``str()`` of the chain shows no secret.
    """
    seen: set[int] = set()
    for _ in range(_SCRUB_DEPTH):
        if error is None or id(error) in seen:
            return
        seen.add(id(error))
        _scrub_args(error)
        error = error.__cause__ or error.__context__


def _scrub_args(error: BaseException) -> None:
    try:
        args = error.args
        scrubbed = tuple(redact(arg) if isinstance(arg, str) else arg for arg in args)
        if scrubbed != args:
            error.args = scrubbed
        if not isinstance(error, OSError) and any(isinstance(arg, str) for arg in args):
            text = str(error)  # a class whose __str__ does not read args (urllib3's, some SDKs')
            if redact(text) != text:
                error.args = (redact(text),)
                if redact(str(error)) != str(error):
                    _replace_str(error, redact(text))
    except Exception:  # noqa: BLE001 - scrubbing must never replace the error being reported
        return


def _replace_str(error: BaseException, text: str) -> None:
    """Last resort for a class whose ``__str__`` ignores ``args``: record the text it must show."""
    for name in ("message", "msg", "reason"):
        if isinstance(getattr(error, name, None), str):
            try:
                setattr(error, name, text)
            except AttributeError:
                continue


def scrub_handled_exception() -> None:
    """Scrub the exception being handled right now (the one a new exception will chain), if any."""
    scrub_exception(sys.exc_info()[1])


class RedactingFilter(logging.Filter):
    """A logging filter that applies ``redact`` to a record's message and its exception text."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is the handler's to report
            return True
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and record.exc_info[1] is not None:
            scrub_exception(record.exc_info[1])
            record.exc_text = None  # formatted again, from the scrubbed exception
        return True


_FILTER = RedactingFilter()

# Third-party loggers that print our request URLs or headers at DEBUG (urllib3 logs each request's
# path and query, botocore the signed headers): ``open_store`` and the built-in stores filter them.
REDACTED_LIBRARY_LOGGERS: tuple[str, ...] = (
    "urllib3.connectionpool",
    "urllib3.poolmanager",
    "urllib3.util.retry",
    "botocore.auth",
    "botocore.endpoint",
    "botocore.httpsession",
    "botocore.parsers",
    "azure.core.pipeline.policies.http_logging_policy",
    "fsspec.http",
    "google.cloud.storage",
    "huggingface_hub.utils._http",
    "httpx2",
)


def redact_loggers(names: Iterable[str]) -> None:
    """Add the redacting filter to each named logger (once)."""
    for name in names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with the redacting filter: every logger of this package comes from here."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


class RedactingWriter:
    """A text stream that writes ``redact(text)`` to ``target`` (the CLI's stdout and stderr).

    Text is redacted line by line: a line is held until its newline (or ``flush``), so a URL split
    over two ``write`` calls is still seen whole.
    """

    def __init__(self, target: TextIO) -> None:
        self.target = target
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            complete, _, self._pending = self._pending.rpartition("\n")
            self.target.write(redact(complete) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.target.write(redact(self._pending))
            self._pending = ""
        self.target.flush()

    def isatty(self) -> bool:
        return self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.target, "encoding", "utf-8")
