"""Exception classes users can catch.

Every error message says what was expected, what was found, and how to fix it. Each class also
derives from the builtin that older code catches (``ValueError``, ``OSError``, ...), so that code
written against MosaicML Streaming keeps working.
"""

from __future__ import annotations

import json
from numbers import Integral
from typing import Literal, overload

from stream_plugin.redaction import redact, scrub_handled_exception


class StreamPluginError(Exception):
    """Base class of every error this package raises on purpose.

    Its message passes the redaction rule (``stream_plugin.redaction``): a URL's password and query
    values never show. So does the exception being handled when it is made (its future ``__context__``
    and, with ``raise ... from``, its ``__cause__``), with that one's own chain.
    """

    def __init__(self, *args: object) -> None:
        scrub_handled_exception()
        super().__init__(*(redact(arg) if isinstance(arg, str) else arg for arg in args))


class ConfigError(StreamPluginError, ValueError):
    """An argument has a value that cannot work (wrong type, out of range, conflicting options)."""


class ConfigTypeError(ConfigError, TypeError):
    """An argument has the wrong type (MosaicML raises ``TypeError`` there; ``ValueError`` catches it too)."""


class MissingDependencyError(StreamPluginError, ImportError):
    """An optional package (brotli, python-snappy, xxhash, Pillow, ...) is needed but not installed."""


class EncodingError(StreamPluginError, ValueError):
    """A column encoding is unknown, or a value does not fit the encoding of its column."""


class EncodingTypeError(EncodingError, TypeError, AttributeError):
    """A value's type does not fit its column's encoding (a str for ``'int'``, bytes for ``'pil'``).

    MosaicML raises ``AttributeError`` there, so ``except AttributeError`` written for it still catches
    this; ``TypeError`` is Python's own error for it, and ``ValueError`` (``EncodingError``) ours."""


class UnknownEncodingError(EncodingError, TypeError):
    """The encoding name is not registered (MosaicML's MDSWriter raises ``TypeError`` there)."""


class UnsafeTypeError(StreamPluginError, PermissionError, ValueError):
    """Decoding this column would run arbitrary code (``pkl``) and the user did not opt in (MosaicML
    raises ``ValueError`` there)."""


class FormatError(StreamPluginError, ValueError):
    """A file on disk does not follow the shard format (see docs of ``stream_plugin.format``)."""


class IndexFormatError(FormatError):
    """``index.json`` is not valid JSON, has the wrong version, or has malformed shard entries."""


class IndexJSONError(IndexFormatError, json.JSONDecodeError):
    """``index.json`` is not valid JSON (or not UTF-8); also the ``json.JSONDecodeError`` MosaicML raises.

    It keeps the position of the error (``pos``, ``lineno``, ``colno``) but not the document."""

    def __init__(self, message: str, pos: int = 0, lineno: int = 1, colno: int = 1) -> None:
        # JSONDecodeError's own __init__ wants the whole document; the fields are set here instead.
        scrub_handled_exception()
        message = redact(message)
        ValueError.__init__(self, message)
        self.msg, self.doc, self.pos, self.lineno, self.colno = message, "", pos, lineno, colno

    def __reduce__(self) -> tuple[type[IndexJSONError], tuple[str, int, int, int]]:
        return type(self), (self.msg, self.pos, self.lineno, self.colno)


class MissingIndexError(IndexFormatError, RuntimeError):
    """A local-only stream's folder has no ``index.json`` (MosaicML raises ``RuntimeError`` there)."""


class UnsafePathError(IndexFormatError):
    """A basename in ``index.json`` would escape the dataset folder (``..`` or an absolute path)."""


class ShardIntegrityError(FormatError):
    """A shard's size or hash differs from ``index.json``, or its compressed bytes are corrupt."""


class EmptyStreamError(FormatError, RuntimeError):
    """A stream's ``index.json`` lists no samples (MosaicML raises ``RuntimeError`` there)."""


class StorageError(StreamPluginError, OSError, RuntimeError):
    """Reading from or writing to a storage backend failed (MosaicML raises ``RuntimeError`` after its
    retries, and ``FileNotFoundError`` for a missing object: see ``RemoteNotFoundError``)."""


class RemoteChangedError(StorageError):
    """The remote dataset was rewritten (or removed) after the local cache of it was filled."""


class StateError(StreamPluginError, ValueError):
    """A resume state does not match the dataset, settings or position it is loaded into."""


class LayoutError(ConfigError):
    """Ranks that must read the same batches (tensor, context or pipeline parallel replicas) read different
    ones, or data-parallel ranks read the same ones: the first-batch check (``check_layout``) found it."""


def _expectation(minimum: int | None, maximum: int | None, allow_none: bool) -> str:
    if minimum == 1 and maximum is None and allow_none:
        return "a positive int or None"
    bounds = (
        f" in [{minimum}, {maximum}]"
        if minimum is not None and maximum is not None
        else f" >= {minimum}"
        if minimum is not None
        else f" <= {maximum}"
        if maximum is not None
        else ""
    )
    return f"an int{bounds}{' or None' if allow_none else ''}"


@overload
def check_int(
    name: str,
    value: object,
    *,
    minimum: int | None = ...,
    maximum: int | None = ...,
    allow_none: Literal[False] = ...,
    error: type[StreamPluginError] = ...,
    fix: str = ...,
) -> int: ...


@overload
def check_int(
    name: str,
    value: object,
    *,
    minimum: int | None = ...,
    maximum: int | None = ...,
    allow_none: Literal[True],
    error: type[StreamPluginError] = ...,
    fix: str = ...,
) -> int | None: ...


def check_int(
    name: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    allow_none: bool = False,
    error: type[StreamPluginError] = ConfigError,
    fix: str = "",
) -> int | None:
    """``value`` as a plain int within ``[minimum, maximum]`` (either bound optional), or None where allowed.

    The one check of integer options, resume-state fields and index fields. A bool is refused (``True``
    as a count is a bug at the call site); numpy integers are accepted and returned as ``int``. Raises
    ``error`` (``ConfigTypeError`` for a wrong type when ``error`` is ``ConfigError``) with one message:
    ``"{name}: expected <kind and bounds>, found <value>; {fix}"``, the value prefixed by its type when
    the type is wrong (``found str '4'``, ``found None``).
    """
    if type(value) is int and (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
        return value  # the common case, first: this runs on the order maths' paths
    if value is None and allow_none:
        return None
    if type(value) is not int and (isinstance(value, bool) or not isinstance(value, Integral)):
        found = "None" if value is None else f"{type(value).__name__} {value!r:.80}"
        kind = ConfigTypeError if error is ConfigError else error
        raise kind(_int_message(name, minimum, maximum, allow_none, found, fix))
    number = int(value)
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise error(_int_message(name, minimum, maximum, allow_none, repr(number), fix))
    return number


def _int_message(
    name: str, minimum: int | None, maximum: int | None, allow_none: bool, found: str, fix: str
) -> str:
    return f"{name}: expected {_expectation(minimum, maximum, allow_none)}, found {found}" + (
        f"; {fix}" if fix else ""
    )


__all__ = [
    "check_int",
    "StreamPluginError",
    "ConfigError",
    "ConfigTypeError",
    "MissingDependencyError",
    "EncodingError",
    "UnknownEncodingError",
    "UnsafeTypeError",
    "FormatError",
    "IndexFormatError",
    "MissingIndexError",
    "UnsafePathError",
    "ShardIntegrityError",
    "EmptyStreamError",
    "StorageError",
    "RemoteChangedError",
    "StateError",
    "LayoutError",
]
