"""Our errors are caught by the ``except`` clauses written for MosaicML Streaming 0.13's builtins."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_plugin import MDSWriter, Stream
from stream_plugin.errors import (
    ConfigTypeError,
    EmptyStreamError,
    MissingIndexError,
    StorageError,
    UnknownEncodingError,
    UnsafeTypeError,
)
from stream_plugin.format.compression import compress
from stream_plugin.format.index import load_index
from stream_plugin.storage.base import RemoteNotFoundError


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (ConfigTypeError, (TypeError, ValueError)),
        (UnknownEncodingError, (TypeError, ValueError)),
        (EmptyStreamError, (RuntimeError, ValueError)),
        (MissingIndexError, (RuntimeError, ValueError)),
        (StorageError, (RuntimeError, OSError)),
        (RemoteNotFoundError, (RuntimeError, FileNotFoundError)),
        (UnsafeTypeError, (ValueError, PermissionError)),
    ],
)
def test_errors_subclass_the_builtins_mosaicml_raises(ours: type, theirs: tuple[type, ...]) -> None:
    assert all(issubclass(ours, builtin) for builtin in theirs)


def test_mdswriter_unknown_encoding_is_a_type_error(tmp_path: Path) -> None:
    with pytest.raises(
        TypeError, match="MDSWriter column .x.: expected a column encoding in .*found .not-an-encoding."
    ):
        MDSWriter(out=str(tmp_path / "out"), columns={"x": "not-an-encoding"})


def test_compress_non_bytes_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="compress: expected bytes, bytearray or memoryview, found str"):
        compress("zstd", "text")  # type: ignore[arg-type]


def test_a_missing_local_index_is_a_runtime_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="expected an index file, found none"):
        load_index(tmp_path)
    assert Stream(local=str(tmp_path)).remote_dir is None
