"""Whole-file shard compression (spec section 7): codec names, levels, and corruption-aware decompression.

The byte formats are those MosaicML Streaming 0.13 reads and writes: a standard zstd frame, gzip
framing, bz2, brotli and raw-block snappy. Users add codecs with :func:`register_codec`.
"""

from __future__ import annotations

import bz2
import gzip
import io
import os
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import zstandard

from stream_plugin.errors import ConfigError, ConfigTypeError, MissingDependencyError, ShardIntegrityError

__all__ = [
    "CompressionSpec",
    "codec_families",
    "compress",
    "decompress",
    "decompress_file",
    "parse_compression",
    "register_codec",
]

Buffer = bytes | memoryview
CompressFn = Callable[[bytes, "int | None"], bytes]
DecompressFn = Callable[[bytes], bytes]
# Reads a compressed stream, writes the raw bytes; returns how many it wrote.
StreamDecompressFn = Callable[[IO[bytes], IO[bytes]], int]

_CHUNK = 1 << 20


@dataclass(frozen=True)
class _Codec:
    compress: CompressFn
    decompress: DecompressFn
    levels: range | None
    default_level: int | None
    stream_decompress: StreamDecompressFn | None = None


def _import_optional(module: str, family: str, extra: str) -> Any:
    """Import an optional codec package on first use, with an install hint when it is missing."""
    try:
        return __import__(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"compression {family!r} needs the {module!r} package, found it is not importable ({exc}); install it with: pip install 'stream-plugin[{extra}]'"
        ) from exc


# --------------------------------------------------------------------------------------------------
# Built-in codecs.


def _zstd_compress(data: bytes, level: int | None) -> bytes:
    # A content checksum lets the reader catch bit flips; it is part of the standard frame.
    return zstandard.ZstdCompressor(level=level or 3, write_checksum=True).compress(data)


class OutputLimitExceeded(Exception):
    """Raised by ``_BoundedSink`` when decompressed output passes the size index.json declares."""


class _BoundedSink:
    """A write-only file that refuses to grow past ``limit`` bytes: nothing past it reaches the disk."""

    def __init__(self, sink: IO[bytes], limit: int) -> None:
        self._sink = sink
        self.limit = limit
        self.written = 0

    @property
    def remaining(self) -> int:
        return self.limit - self.written

    def write(self, data: Buffer) -> int:
        size = len(data)
        if size > self.remaining:
            raise OutputLimitExceeded(self.written + size)
        self.written += size
        return self._sink.write(data)


# One zstd input byte can expand to at most ~32 KiB (a 4-byte RLE block yields 128 KiB), so feeding
# ``remaining // _ZSTD_MAX_RATIO`` bytes at a time keeps a bomb's output near its declared size.
_ZSTD_MAX_RATIO = 1 << 15
_ZSTD_MIN_FEED = 256


def _zstd_feed_size(sink: IO[bytes] | _BoundedSink) -> int:
    if isinstance(sink, _BoundedSink):
        return max(_ZSTD_MIN_FEED, min(_CHUNK, sink.remaining // _ZSTD_MAX_RATIO))
    return _CHUNK


def _zstd_stream(source: IO[bytes], sink: IO[bytes]) -> int:
    """Decompress one or more concatenated zstd frames; input that ends inside a frame is an error."""
    decompressor = zstandard.ZstdDecompressor()
    written = frames = 0
    frame: Any = None
    chunk = source.read(_zstd_feed_size(sink))
    while chunk:
        if frame is None:
            frame = decompressor.decompressobj()
        written += sink.write(frame.decompress(chunk))
        chunk = b""
        if frame.eof:  # the next frame, if any, starts in what this one left over
            frames += 1
            chunk, frame = frame.unused_data, None
        if not chunk:
            chunk = source.read(_zstd_feed_size(sink))
    if frame is not None or frames == 0:
        raise zstandard.ZstdError(f"input ended inside zstd frame {frames + 1}")
    return written


def _zstd_decompress(data: bytes) -> bytes:
    out = io.BytesIO()
    _zstd_stream(io.BytesIO(data), out)
    return out.getvalue()


def _gz_compress(data: bytes, level: int | None) -> bytes:
    # mtime=0 keeps the output reproducible (MosaicML stamped the clock; readers ignore it).
    return gzip.compress(data, 9 if level is None else level, mtime=0)


def _gz_stream(source: IO[bytes], sink: IO[bytes]) -> int:
    return _copy_from(gzip.GzipFile(fileobj=source, mode="rb"), sink)


def _bz2_compress(data: bytes, level: int | None) -> bytes:
    return bz2.compress(data, 9 if level is None else level)


def _bz2_stream(source: IO[bytes], sink: IO[bytes]) -> int:
    return _copy_from(bz2.BZ2File(source, mode="rb"), sink)


class _Readable(Protocol):
    """What ``_copy_from`` needs: ``read(n)`` and ``close()`` (GzipFile, BZ2File, ...)."""

    def read(self, size: int = ..., /) -> bytes: ...
    def close(self) -> None: ...


def _copy_from(reader: _Readable, sink: IO[bytes]) -> int:
    written = 0
    with closing(reader):
        while chunk := reader.read(_CHUNK):
            written += sink.write(chunk)
    return written


def _br_compress(data: bytes, level: int | None) -> bytes:
    brotli = _import_optional("brotli", "br", "brotli")
    return brotli.compress(data, quality=11 if level is None else level)


def _br_decompress(data: bytes) -> bytes:
    return _import_optional("brotli", "br", "brotli").decompress(data)


def _br_stream(source: IO[bytes], sink: IO[bytes]) -> int:
    brotli = _import_optional("brotli", "br", "brotli")
    decompressor = brotli.Decompressor()
    written = 0
    while chunk := source.read(_CHUNK):
        written += sink.write(decompressor.process(chunk, output_buffer_limit=_CHUNK))
        while not decompressor.can_accept_more_data():  # output held back by the limit
            written += sink.write(decompressor.process(b"", output_buffer_limit=_CHUNK))
    while not decompressor.is_finished() and (rest := decompressor.process(b"", output_buffer_limit=_CHUNK)):
        written += sink.write(rest)
    if not decompressor.is_finished():
        raise ValueError("input ended inside the brotli stream")
    return written


def _snappy_compress(data: bytes, level: int | None) -> bytes:
    return _import_optional("snappy", "snappy", "snappy").compress(data)


def _snappy_decompress(data: bytes) -> bytes:
    return _import_optional("snappy", "snappy", "snappy").decompress(data)


_CODECS: dict[str, _Codec] = {
    "zstd": _Codec(_zstd_compress, _zstd_decompress, range(1, 23), 3, _zstd_stream),
    "gz": _Codec(_gz_compress, gzip.decompress, range(0, 10), 9, _gz_stream),
    "bz2": _Codec(_bz2_compress, bz2.decompress, range(1, 10), 9, _bz2_stream),
    "br": _Codec(_br_compress, _br_decompress, range(0, 12), 11, _br_stream),
    "snappy": _Codec(_snappy_compress, _snappy_decompress, None, None),
}


def codec_families() -> list[str]:
    """Compression families usable in ``compression``, built-in and registered."""
    return sorted(_CODECS)


def register_codec(
    family: str,
    compress: Callable[[bytes, int | None], bytes],
    decompress: Callable[[bytes], bytes],
    *,
    levels: range | None,
    default_level: int | None,
    overwrite: bool = False,
) -> None:
    """Add a whole-file codec; its family is also the file suffix (MosaicML only reads its own five)."""
    if not isinstance(family, str) or not family.isidentifier():
        raise ConfigError(
            f"expected a codec family that is a plain identifier (it becomes the file suffix and the name before ':'), found {family!r}; pick a name like 'lz4'"
        )
    if family in _CODECS and not overwrite:
        raise ConfigError(
            f"expected a new codec family, found {family!r} is already registered; pick another name or pass overwrite=True"
        )
    if (levels is None) != (default_level is None) or (levels is not None and default_level not in levels):
        raise ConfigError(
            f"expected default_level inside levels (or both None for a codec without levels), found levels={levels!r} and default_level={default_level!r}; fix one of them"
        )
    _CODECS[family] = _Codec(compress, decompress, levels, default_level)


def unregister_codec(family: str) -> None:
    """Remove a registered codec; mainly for tests. Built-in families cannot be removed."""
    if family in _BUILTIN_FAMILIES:
        raise ConfigError(
            f"expected a user-registered codec family, found built-in {family!r}; overwrite it with register_codec(..., overwrite=True) instead"
        )
    _CODECS.pop(family, None)


_BUILTIN_FAMILIES = frozenset(_CODECS)


def _codec(family: str) -> _Codec:
    codec = _CODECS.get(family)
    if codec is None:
        raise ConfigError(
            f"expected a compression family in {codec_families()}, found {family!r} (it is not a supported compression algorithm); use one of those (optionally with ':<level>'), or None for no compression"
        )
    return codec


@dataclass(frozen=True)
class CompressionSpec:
    """A codec family and optional level, validated on construction."""

    family: str
    level: int | None = None

    def __post_init__(self) -> None:
        codec = _codec(self.family)
        if self.level is None:
            return
        if codec.levels is None:
            raise ConfigError(
                f"expected no level for compression {self.family!r}, found {self.level!r}; write {self.family!r} alone"
            )
        if isinstance(self.level, bool) or not isinstance(self.level, int) or self.level not in codec.levels:
            raise ConfigError(
                f"expected a {self.family!r} level in {codec.levels.start}..{codec.levels.stop - 1} (default {codec.default_level}), found {self.level!r} ('{self.family}:{self.level}' is not a supported compression algorithm); pick a level in that range"
            )

    @property
    def name(self) -> str:
        """The string stored in index.json: the family, plus ':<level>' when the user gave one."""
        return self.family if self.level is None else f"{self.family}:{self.level}"

    @property
    def extension(self) -> str:
        """File suffix (without the dot) of compressed files."""
        return self.family

    @property
    def effective_level(self) -> int | None:
        """The level the codec actually uses."""
        return self.level if self.level is not None else _codec(self.family).default_level


def parse_compression(spec: str | CompressionSpec | None) -> CompressionSpec | None:
    """Parse 'family' or 'family:level' (as in index.json); None means no compression."""
    if spec is None or isinstance(spec, CompressionSpec):
        return spec
    if not isinstance(spec, str):
        raise ConfigError(
            f"expected compression as a string like 'zstd' or 'zstd:7', or None, found {type(spec).__name__} {spec!r}; pass a string"
        )
    family, colon, level_text = spec.partition(":")
    if not colon:
        return CompressionSpec(family)
    # Only the canonical spelling: index.json stores the user's string and MosaicML looks it up as is.
    if not level_text.lstrip("-").isdigit() or str(int(level_text)) != level_text:
        raise ConfigError(
            f"expected compression 'family:<integer level>' such as 'zstd:7', found {spec!r}; write the level as a plain integer"
        )
    return CompressionSpec(family, int(level_text))


def _as_spec(spec: str | CompressionSpec) -> CompressionSpec:
    parsed = parse_compression(spec)
    if parsed is None:
        raise ConfigError(
            "expected a compression name such as 'zstd', found None; skip the call when there is no compression"
        )
    return parsed


def compress(spec: str | CompressionSpec | None, data: Buffer) -> bytes:
    """Compress a whole shard (or meta) file's bytes; ``spec=None`` returns them as they are (as MosaicML's)."""
    # bytes(5) would be five zero bytes and bytes([1, 2]) a copy: refuse anything but a buffer.
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ConfigTypeError(
            f"compress: expected bytes, bytearray or memoryview, found {type(data).__name__}; encode text "
            "first (text.encode()) or pass the file's bytes"
        )
    if spec is None:
        return bytes(data)
    parsed = _as_spec(spec)
    return _codec(parsed.family).compress(bytes(data), parsed.effective_level)


def _corrupt(parsed: CompressionSpec, source: str, found: str) -> ShardIntegrityError:
    return ShardIntegrityError(
        f"{source}: expected a complete {parsed.family!r} stream, found {found}; delete the local copy and download it again, and if that does not help re-write the shard (the remote copy is corrupt)"
    )


def _check_size(parsed: CompressionSpec, source: str, size: int, expected_size: int | None) -> None:
    if expected_size is not None and size != expected_size:
        raise _corrupt(
            parsed,
            source,
            f"it decompresses to {size} bytes instead of the {expected_size} that index.json records",
        )


def decompress(
    spec: str | CompressionSpec | None, data: Buffer, *, source: str = "<data>", expected_size: int | None = None
) -> bytes:
    """Decompress in memory; truncated or corrupt input raises ShardIntegrityError naming ``source``.

    ``spec=None`` returns the bytes as they are (as MosaicML's ``decompress(None, data)``)."""
    if spec is None:
        return bytes(data)
    parsed = _as_spec(spec)
    if len(data) == 0:
        raise _corrupt(parsed, source, "an empty input")
    try:
        raw = _codec(parsed.family).decompress(bytes(data))
    except (MissingDependencyError, MemoryError):
        raise
    except Exception as exc:  # each codec has its own error types; all mean the input is bad
        raise _corrupt(parsed, source, f"truncated or corrupt data ({type(exc).__name__}: {exc})") from exc
    _check_size(parsed, source, len(raw), expected_size)
    return raw


def decompress_file(
    spec: str | CompressionSpec,
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    source: str | None = None,
    expected_size: int | None = None,
) -> int:
    """Decompress ``src`` into ``dst`` (a temporary path the caller publishes); returns bytes written.

    zstd, gz, bz2 and br stream in chunks so memory stays flat. With ``expected_size`` (the raw size
    index.json declares) decompression stops with ``ShardIntegrityError`` as soon as the output would
    pass it, so a decompression bomb never fills the disk. On error ``dst`` is removed.
    """
    parsed = _as_spec(spec)
    label = source if source is not None else os.fspath(src)
    codec = _codec(parsed.family)
    if Path(src).stat().st_size == 0:
        raise _corrupt(parsed, label, "an empty file")
    try:
        with open(src, "rb") as reader, open(dst, "wb") as file:
            writer: Any = file if expected_size is None else _BoundedSink(file, expected_size)
            if codec.stream_decompress is not None:
                written = codec.stream_decompress(reader, writer)
            else:
                written = writer.write(codec.decompress(reader.read()))
        _check_size(parsed, label, written, expected_size)
    except OutputLimitExceeded as exc:
        Path(dst).unlink(missing_ok=True)
        raise _corrupt(
            parsed,
            label,
            f"it decompresses past the {expected_size} bytes that index.json records (stopped at "
            f"{exc.args[0]}; a corrupt file or a decompression bomb)",
        ) from None
    except (MissingDependencyError, MemoryError, ShardIntegrityError):
        Path(dst).unlink(missing_ok=True)
        raise
    except OSError as exc:
        Path(dst).unlink(missing_ok=True)
        if isinstance(exc, gzip.BadGzipFile) or exc.filename is None:  # codec errors, not file-system ones
            raise _corrupt(parsed, label, f"truncated or corrupt data ({type(exc).__name__}: {exc})") from exc
        raise
    except Exception as exc:  # each codec has its own error types; all mean the input is bad
        Path(dst).unlink(missing_ok=True)
        raise _corrupt(parsed, label, f"truncated or corrupt data ({type(exc).__name__}: {exc})") from exc
    return written
