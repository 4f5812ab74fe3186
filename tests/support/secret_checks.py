"""Where a secret could escape to, gathered in one place, and the assertion that it is in none of them.

A test puts a secret where a user puts one (a URL, ``storage_options``, the environment), runs a read
or a failure, then hands ``assert_no_secret`` everything a person or a log collector could see: the
exception with its whole chain (``chain_text``), every log record at every level (``log_texts``),
standard output and error, ``repr()`` of the dataset's parts, the resume state, and every file under
``local`` (``folder_texts``: names and bytes).
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Iterable
from pathlib import Path

_FORMATTER = logging.Formatter("%(name)s %(levelname)s %(message)s")


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
    """Each record's message, and the record formatted with its exception and stack, if any."""
    texts = []
    for record in records:
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
