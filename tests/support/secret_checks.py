"""Where a secret could escape to, gathered in one place, and the assertion that it is in none of them.

A test puts a secret where a user puts one (a URL, ``storage_options``, the environment), runs a read
or a failure, then hands ``assert_no_secret`` everything a person or a log collector could see: the
exception with its whole chain (``chain_text``), every log record at every level (``log_texts``),
standard output and error, ``repr()`` of the dataset's parts, the resume state, and every file under
``local`` (``folder_texts``: names and bytes).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

_FORMATTER = logging.Formatter("%(name)s %(levelname)s %(message)s")
# Loggers of the test servers that run inside the test process (moto's): what a server logs about the
# requests it received is not something the client printed.
SERVER_LOGGERS = ("moto", "werkzeug")


def chain_text(error: BaseException) -> str:
    """``error`` and every exception it chains (``__cause__``, and ``__context__`` unless suppressed):
    their ``str``, ``repr`` and ``args``, and the formatted traceback of the whole chain."""
    pieces = ["".join(traceback.format_exception(error))]
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        pieces += [str(current), repr(current), repr(current.args), *getattr(current, "__notes__", ())]
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None
    return "\n".join(pieces)


def log_texts(records: Iterable[logging.LogRecord]) -> list[str]:
    """Each record's message, and the record formatted with its exception and stack, if any (but the
    records of the in-process test servers, ``SERVER_LOGGERS``)."""
    texts = []
    for record in records:
        if record.name.split(".")[0] in SERVER_LOGGERS:
            continue
        texts.append(record.getMessage())
        texts.append(_FORMATTER.format(record))
    return texts


def folder_texts(folder: str | os.PathLike[str]) -> list[bytes]:
    """The path and the bytes of every file (and the path of every folder) under ``folder``."""
    found: list[bytes] = []
    root = Path(folder)
    if not root.exists():
        return found
    for path in sorted(root.rglob("*")):
        found.append(os.fsencode(path))
        if path.is_file() and not path.is_symlink():
            found.append(path.read_bytes())
    return found


def assert_no_secret(secret: str, *texts: str | bytes) -> None:
    """Fail, naming where and showing the surroundings, if ``secret`` occurs in any of ``texts``."""
    assert len(secret) >= 8, "a secret this short could occur by chance: pick a longer one"
    for number, text in enumerate(texts):
        needle: str | bytes = secret.encode() if isinstance(text, bytes) else secret
        at = text.find(needle)  # type: ignore[arg-type]
        if at >= 0:
            context = text[max(0, at - 200) : at + len(secret) + 80]
            raise AssertionError(f"the secret leaked into text #{number} of {len(texts)}: ...{context!r}...")


def assert_no_secrets(secrets: Iterable[str], *texts: str | bytes) -> None:
    """``assert_no_secret`` for each of ``secrets``."""
    for secret in secrets:
        assert_no_secret(secret, *texts)


def as_in_a_fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take the redacting filter off third-party loggers for this test, as in a new process.

    A store adds it to them when it opens (``redaction.REDACTED_LIBRARY_LOGGERS``) and it stays for the
    rest of the process: without this, a test would pass only because an earlier test opened another
    store.
    """
    from stream_plugin.redaction import REDACTED_LIBRARY_LOGGERS, RedactingFilter

    for name in REDACTED_LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        kept = [found for found in logger.filters if not isinstance(found, RedactingFilter)]
        monkeypatch.setattr(logger, "filters", kept)


def seen_by_anyone(
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    local: str | os.PathLike[str],
    *more: str,
) -> list[str | bytes]:
    """Every log record caught so far, stdout and stderr (read, so call this once, at the end), the
    files under ``local``, and ``more``."""
    out, err = capfd.readouterr()
    return [*log_texts(caplog.records), out, err, *folder_texts(local), *more]


def dataset_texts(dataset: Any, consumed: int) -> list[str]:
    """``repr()`` of a ``StreamingDataset`` and of its streams, and its resume state (at ``consumed``
    samples, and at the start) as JSON."""
    return [
        repr(dataset),
        *(repr(stream) for stream in dataset.streams),
        json.dumps(dataset.state_dict(consumed, from_beginning=False)),
        json.dumps(dataset.state_dict()),
    ]


def closed_port() -> int:
    """A loopback port that was just free and has no listener: connecting to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def read_ids(remote: str, local: Path, options: dict[str, Any] | None = None) -> tuple[Any, list[int]]:
    """A dataset over ``remote`` (no retries, a short timeout) and the sorted ids of one pass over it."""
    from stream_plugin import StreamingDataset

    dataset = StreamingDataset(
        remote=remote,
        local=str(local),
        storage_options=options,
        batch_size=4,
        download_retry=0,
        download_timeout=10,
    )
    return dataset, sorted(int(sample["id"]) for sample in dataset)

