"""MDS column encodings: how one column value becomes bytes in a shard, and back (spec section 4).

Every built-in encoding writes exactly the bytes MosaicML Streaming 0.13 writes, so datasets move
freely between the two libraries. Users add their own with :func:`register_encoding`.
"""

from __future__ import annotations

import io
import json
import numbers
import pickle
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np

from stream_plugin.errors import (
    EncodingError,
    EncodingTypeError,
    FormatError,
    MissingDependencyError,
    UnknownEncodingError,
)

if TYPE_CHECKING:
    from PIL import Image as PILImage

__all__ = [
    "TEXT_COLUMN_TYPES",
    "ColumnEncoding",
    "check_text_column_types",
    "decode_pil",
    "decode_text_value",
    "encode_text_value",
    "encode_value",
    "encoding_names",
    "get_encoding",
    "is_encoding",
    "keep_view",
    "pil_image_module",
    "read_pil_header",
    "register_encoding",
    "with_image_decoder",
]

Buffer = bytes | memoryview


@dataclass(frozen=True)
class ColumnEncoding:
    """One column encoding: its index.json name, its coder pair and what readers may assume.

    ``decode`` is the reference. A reader that batch-decodes with ``numpy_dtype`` must give the same
    values: for ``int`` that means Python ints (``.tolist()``), not numpy scalars.
    """

    name: str
    encode: Callable[[Any], bytes]
    decode: Callable[[Buffer], Any]
    size: int | None = None
    numpy_dtype: np.dtype | None = None
    shape: tuple[int, ...] | None = None
    unsafe: bool = False
    # A struct format whose single field decodes to exactly what ``decode`` returns: the per-sample
    # reader unpacks it straight from the map instead of slicing first.
    struct_format: str | None = None


# --------------------------------------------------------------------------------------------------
# Helpers shared by the coders.


def _mismatch(
    encoding: str, expected: str, value: Any, fix: str, *, error: type[EncodingError] = EncodingTypeError
) -> EncodingError:
    """Build the error a coder raises when a value does not fit; encode_value adds the column.

    A value of the wrong type gets ``EncodingTypeError`` (also an ``AttributeError``, as MosaicML
    raises); a value of the right type that does not fit (range, dtype, shape) passes
    ``error=EncodingError`` (a ``ValueError``, as MosaicML raises)."""
    return error(
        f"encoding {encoding!r} expects {expected}, found {type(value).__name__} {_short_repr(value)}; {fix}"
    )


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _is_integer(value: Any) -> bool:
    # bool is an int subclass but "True" is not decimal text; numpy bools are not Integral anyway.
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def pil_image_module() -> Any:
    """Import Pillow on first use: most datasets have no image columns."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingDependencyError(
            f"image encodings (pil, jpeg, png, list[...], jpeg_array) need Pillow, found it is not importable ({exc}); install it with: pip install 'stream-plugin[pillow]'"
        ) from exc
    return Image


def _require_image(encoding: str, value: Any) -> PILImage.Image:
    image_module = pil_image_module()
    if not isinstance(value, image_module.Image):
        raise _mismatch(encoding, "a PIL.Image.Image", value, "open the image with PIL.Image.open(...)")
    return value


def _to_bytes(data: Buffer) -> bytes:
    return data if isinstance(data, bytes) else bytes(data)


# --------------------------------------------------------------------------------------------------
# Plain and textual encodings.


def _encode_bytes(value: Any) -> bytes:
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if not isinstance(value, bytes):
        raise _mismatch("bytes", "bytes", value, "pass bytes, or pick an encoding that fits this type")
    return value


def _encode_str(value: Any) -> bytes:
    if not isinstance(value, str):
        raise _mismatch("str", "a str", value, "convert the value with str(...) or use the 'json' encoding")
    return value.encode("utf-8")


def _decode_str(data: Buffer) -> str:
    return str(data, "utf-8")


_INT64 = np.iinfo(np.int64)


def _encode_int(value: Any) -> bytes:
    if not _is_integer(value) or not _INT64.min <= int(value) <= _INT64.max:
        error = EncodingError if _is_integer(value) else EncodingTypeError
        raise _mismatch(
            "int", "an integer in the int64 range", value, "use 'str_int' for larger integers", error=error
        )
    return struct.pack("<q", int(value))


def _decode_int(data: Buffer) -> int:
    return int.from_bytes(data, "little", signed=True)


def _encode_str_int(value: Any) -> bytes:
    if not _is_integer(value):
        raise _mismatch("str_int", "an integer", value, "convert the value with int(...)")
    return str(int(value)).encode("utf-8")


def _decode_str_int(data: Buffer) -> int:
    return int(str(data, "utf-8"))


def _encode_str_float(value: Any) -> bytes:
    if not _is_real(value):
        raise _mismatch("str_float", "a float", value, "convert the value with float(...)")
    # MosaicML writes str(float), which equals repr(float) and round-trips exactly.
    return repr(float(value)).encode("utf-8")


def _decode_str_float(data: Buffer) -> float:
    return float(str(data, "utf-8"))


def _encode_str_decimal(value: Any) -> bytes:
    if not isinstance(value, Decimal):
        raise _mismatch("str_decimal", "a decimal.Decimal", value, "wrap the value as Decimal(str(value))")
    return str(value).encode("utf-8")


def _decode_str_decimal(data: Buffer) -> Decimal:
    return Decimal(str(data, "utf-8"))


def _encode_json(value: Any) -> bytes:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise _mismatch(
            "json",
            f"a JSON-serialisable object ({exc})",
            value,
            "convert it to dicts, lists, str and numbers, or use 'pkl'",
        ) from exc
    return text.encode("utf-8")


def _decode_json(data: Buffer) -> Any:
    return json.loads(str(data, "utf-8"))


# Protocol 4 is what MosaicML writes on Python 3.8 to 3.13; pinning it keeps output stable on 3.14+.
_PICKLE_PROTOCOL = 4


def _encode_pickle(value: Any) -> bytes:
    try:
        return pickle.dumps(value, protocol=_PICKLE_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise _mismatch(
            "pkl", f"a picklable object ({exc})", value, "make the object picklable", error=EncodingError
        ) from exc


def _decode_pickle(data: Buffer) -> Any:
    return pickle.loads(data)


# --------------------------------------------------------------------------------------------------
# Numeric scalars.

_SCALAR_TYPES = (
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
)


def _scalar_encoding(type_name: str) -> ColumnEncoding:
    dtype = np.dtype(type_name).newbyteorder("<")
    scalar_type = dtype.type
    is_integer = dtype.kind in "iu"
    limits = np.iinfo(dtype) if is_integer else None

    def encode(value: Any) -> bytes:
        if is_integer:
            assert limits is not None
            if not _is_integer(value) or not limits.min <= int(value) <= limits.max:
                raise _mismatch(
                    type_name,
                    f"an integer in [{limits.min}, {limits.max}]",
                    value,
                    "use a wider integer type",
                    error=EncodingError if _is_integer(value) else EncodingTypeError,
                )
            return scalar_type(int(value)).tobytes()
        if not _is_real(value):
            raise _mismatch(type_name, "a real number", value, "convert the value with float(...)")
        return np.asarray(value, dtype=dtype).tobytes()

    def decode(data: Buffer) -> Any:
        return np.frombuffer(data, dtype, 1)[0]

    return ColumnEncoding(type_name, encode, decode, size=dtype.itemsize, numpy_dtype=dtype, shape=())


# --------------------------------------------------------------------------------------------------
# ndarray: `ndarray`, `ndarray:<dtype>`, `ndarray:<dtype>:<d0>,<d1>,...`.

_DTYPE_CODES = {
    "uint8": 8,
    "int8": 9,
    "uint16": 16,
    "int16": 17,
    "float16": 18,
    "uint32": 32,
    "int32": 33,
    "float32": 34,
    "uint64": 64,
    "int64": 65,
    "float64": 66,
}
_CODE_DTYPES = {code: np.dtype(name).newbyteorder("<") for name, code in _DTYPE_CODES.items()}
_SHAPE_DTYPES = tuple(np.dtype(name).newbyteorder("<") for name in ("uint8", "uint16", "uint32", "uint64"))
_MAX_NDIM = 63  # ndim shares one byte with the 2-bit dim type


def _parse_ndarray_name(name: str) -> tuple[str | None, tuple[int, ...] | None]:
    """Split an ndarray encoding name into its optional dtype and shape, validating both."""
    parts = name.split(":")
    dtype = parts[1] if len(parts) >= 2 else None
    shape_text = parts[2] if len(parts) == 3 else None
    if len(parts) > 3 or (dtype is not None and dtype not in _DTYPE_CODES):
        raise UnknownEncodingError(
            f"expected 'ndarray', 'ndarray:<dtype>' or 'ndarray:<dtype>:<d0>,<d1>,...' with dtype one of {sorted(_DTYPE_CODES)}, found {name!r}; fix the column encoding name"
        )
    if shape_text is None:
        return dtype, None
    try:
        shape = tuple(int(dim) for dim in shape_text.split(","))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1 or len(shape) > _MAX_NDIM:
        raise UnknownEncodingError(
            f"expected the shape in {name!r} to be 1 to {_MAX_NDIM} comma-separated integers >= 1, found {shape_text!r}; fix the column encoding name (e.g. 'ndarray:uint8:2,3')"
        )
    return dtype, shape


def _ndarray_encoding(name: str) -> ColumnEncoding:
    fixed_dtype_name, fixed_shape = _parse_ndarray_name(name)
    fixed_dtype = None if fixed_dtype_name is None else np.dtype(fixed_dtype_name).newbyteorder("<")

    def encode(value: Any) -> bytes:
        if not isinstance(value, np.ndarray):
            raise _mismatch(name, "a numpy.ndarray", value, "convert the value with numpy.asarray(...)")
        if value.dtype.name not in _DTYPE_CODES:
            raise _mismatch(
                name,
                f"an array of dtype in {sorted(_DTYPE_CODES)} (found dtype {value.dtype})",
                value,
                "cast the array with .astype(...)",
                error=EncodingError,
            )
        if fixed_dtype is not None and value.dtype.name != fixed_dtype_name:
            raise _mismatch(
                name,
                f"an array of dtype {fixed_dtype_name} (found dtype {value.dtype})",
                value,
                f"cast the array with .astype('{fixed_dtype_name}')",
                error=EncodingError,
            )
        # The fixes start with MosaicML's phrases, so that code matching its messages keeps working.
        if value.size == 0 or not 1 <= value.ndim <= _MAX_NDIM:
            fix = (
                "Attempting to encode a scalar with NDArray encoding: use a scalar encoding such as 'float64'"
                if value.ndim == 0
                else "Attempting to encode a numpy array with 0 elements: store empty arrays as 'bytes' or 'pkl'"
                if value.size == 0
                else f"reshape the array to at most {_MAX_NDIM} dims"
            )
            raise _mismatch(
                name,
                f"an array with 1 to {_MAX_NDIM} dims, each >= 1 (found shape {value.shape})",
                value,
                fix,
                error=EncodingError,
            )
        if fixed_shape is not None and value.shape != fixed_shape:
            raise _mismatch(
                name,
                f"an array of shape {fixed_shape} (found shape {value.shape})",
                value,
                "reshape the array or drop the shape from the encoding name",
                error=EncodingError,
            )
        parts: list[bytes] = []
        if fixed_dtype is None:
            parts.append(bytes([_DTYPE_CODES[value.dtype.name]]))
        if fixed_shape is None:
            dims = np.asarray(value.shape, np.int64)
            dim_type = next(k for k, t in enumerate(_SHAPE_DTYPES) if int(dims.max()) <= np.iinfo(t).max)
            parts.append(bytes([(value.ndim << 2) | dim_type]))
            parts.append(dims.astype(_SHAPE_DTYPES[dim_type]).tobytes())
        # Little-endian C order whatever the input's byte order or strides.
        parts.append(np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes())
        return b"".join(parts)

    def decode(data: Buffer) -> np.ndarray:
        try:
            return _decode_view(data)
        except (KeyError, ValueError, IndexError) as exc:
            raise FormatError(
                f"expected a {name!r} value (dtype byte, shape header, then the array), found {len(data)} bytes that do not parse ({type(exc).__name__}: {exc}); the shard is corrupt, download or re-write it"
            ) from exc

    def _decode_view(data: Buffer) -> np.ndarray:
        offset = 0
        if fixed_dtype is None:
            dtype = _CODE_DTYPES[data[0]]
            offset = 1
        else:
            dtype = fixed_dtype
        if fixed_shape is None:
            header = data[offset]
            ndim, dim_type = header >> 2, header & 3
            dims = np.frombuffer(data, _SHAPE_DTYPES[dim_type], ndim, offset + 1)
            shape: tuple[int, ...] = tuple(int(dim) for dim in dims)
            offset += 1 + ndim * _SHAPE_DTYPES[dim_type].itemsize
        else:
            shape = fixed_shape
        # Zero-copy view on the caller's buffer; read-only so that no sample aliases another's edits.
        array = np.frombuffer(data, dtype, offset=offset).reshape(shape)
        array.flags.writeable = False
        return array

    size = None
    if fixed_dtype is not None and fixed_shape is not None:
        size = int(np.prod(fixed_shape)) * fixed_dtype.itemsize
    return ColumnEncoding(
        name,
        encode,
        decode,
        size=size,
        numpy_dtype=fixed_dtype if size is not None else None,
        shape=fixed_shape if size is not None else None,
    )


# --------------------------------------------------------------------------------------------------
# Images.


def _encode_pil(value: Any) -> bytes:
    image = _require_image("pil", value)
    mode = image.mode.encode("utf-8")
    width, height = image.size
    return struct.pack("<III", width, height, len(mode)) + mode + image.tobytes()


def read_pil_header(data: Buffer) -> tuple[str, int, int, int]:
    """The header of a stored ``pil`` value (MosaicML's layout): its Pillow mode, width, height, and the
    offset of its raw pixels (``Image.tobytes()``, rows top to bottom) that follow the header."""
    width, height, mode_size = struct.unpack_from("<III", data)
    mode = str(data[12 : 12 + mode_size], "utf-8")
    return mode, width, height, 12 + mode_size


def decode_pil(data: Buffer) -> PILImage.Image:
    """A stored ``pil`` value as the PIL image it was written from (MosaicML's decoder)."""
    mode, width, height, offset = read_pil_header(data)
    return pil_image_module().frombytes(mode, (width, height), _to_bytes(data[offset:]))


def _encode_jpeg(value: Any) -> bytes:
    image = _require_image("jpeg", value)
    from PIL.JpegImagePlugin import JpegImageFile

    # Like MosaicML, keep an opened JPEG file's own bytes instead of re-encoding them lossily.
    filename = getattr(image, "filename", "")
    if isinstance(image, JpegImageFile) and filename:
        with open(filename, "rb") as handle:
            return handle.read()
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=75)  # MosaicML's (and Pillow's) default quality
    return out.getvalue()


def _encode_png(value: Any) -> bytes:
    image = _require_image("png", value)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _decode_image_file(data: Buffer) -> PILImage.Image:
    # BytesIO copies, so the image outlives the shard buffer (which may be an mmap).
    return pil_image_module().open(io.BytesIO(data))


def _pack_items(items: list[bytes]) -> bytes:
    sizes = struct.pack(f"<{len(items)}I", *(len(item) for item in items))
    return sizes + b"".join(items)


def _unpack_items(data: Buffer, count: int, offset: int) -> list[Buffer]:
    sizes = struct.unpack_from(f"<{count}I", data, offset)
    position = offset + 4 * count
    items = []
    for size in sizes:
        items.append(data[position : position + size])
        position += size
    return items


def _list_encoding(
    name: str, item_encode: Callable[[Any], bytes], item_decode: Callable[[Buffer], Any], *, reserved: bool
) -> ColumnEncoding:
    """`list[...]` (with a reserved zero word) and `jpeg_array` (without): n sizes, then n items."""
    prefix = b"\0\0\0\0" if reserved else b""

    def encode(value: Any) -> bytes:
        if not isinstance(value, (list, tuple)):
            raise _mismatch(name, "a list of PIL images or encoded bytes", value, "wrap the images in a list")
        # Items already encoded (JPEG bytes, as MosaicML's jpeg_array takes them) are stored as given.
        items = [
            bytes(item) if isinstance(item, (bytes, bytearray, memoryview)) else item_encode(item)
            for item in value
        ]
        return prefix + struct.pack("<I", len(items)) + _pack_items(items)

    return ColumnEncoding(name, encode, _list_decoder(len(prefix), item_decode))


def _list_decoder(skip: int, item_decode: Callable[[Buffer], Any]) -> Callable[[Buffer], list[Any]]:
    """Decode a list value: ``skip`` reserved bytes, the item count, their sizes, then the items."""

    def decode(data: Buffer) -> list[Any]:
        (count,) = struct.unpack_from("<I", data, skip)
        return [item_decode(item) for item in _unpack_items(data, count, skip + 4)]

    return decode


# The image encodings (one image, or a list of them) and the reserved bytes of each list's header.
_IMAGE_LIST_SKIP = {"list[pil]": 4, "list[jpeg]": 4, "list[png]": 4, "jpeg_array": 0, "jpegarray": 0}
_IMAGE_SINGLE = ("pil", "jpeg", "png")


def with_image_decoder(encoding: ColumnEncoding, item_decode: Callable[[Buffer], Any]) -> ColumnEncoding:
    """The built-in image ``encoding`` with each of its images decoded by ``item_decode`` (same bytes)."""
    if encoding.name in _IMAGE_SINGLE:
        return replace(encoding, decode=item_decode)
    if encoding.name in _IMAGE_LIST_SKIP:
        return replace(encoding, decode=_list_decoder(_IMAGE_LIST_SKIP[encoding.name], item_decode))
    raise UnknownEncodingError(
        f"expected an image encoding in {sorted((*_IMAGE_SINGLE, *_IMAGE_LIST_SKIP))}, found "
        f"{encoding.name!r}; pass an image column"
    )


def keep_view(data: Buffer) -> memoryview:
    """The zero-copy decoder of a ``bytes`` column: the value is a read-only view of the shard's map."""
    return data if isinstance(data, memoryview) else memoryview(data)


# --------------------------------------------------------------------------------------------------
# The registry: built-ins plus user registrations, the documented extension point (as in MosaicML).


def _builtin_encodings() -> dict[str, ColumnEncoding]:
    encodings = [
        # bytes() copies a view and returns a bytes object itself unchanged: the fastest decoder.
        ColumnEncoding("bytes", _encode_bytes, bytes),
        ColumnEncoding("str", _encode_str, _decode_str),
        ColumnEncoding(
            "int", _encode_int, _decode_int, size=8, numpy_dtype=np.dtype("<i8"), shape=(), struct_format="<q"
        ),
        *(_scalar_encoding(type_name) for type_name in _SCALAR_TYPES),
        ColumnEncoding("str_int", _encode_str_int, _decode_str_int),
        ColumnEncoding("str_float", _encode_str_float, _decode_str_float),
        ColumnEncoding("str_decimal", _encode_str_decimal, _decode_str_decimal),
        _ndarray_encoding("ndarray"),
        ColumnEncoding("pil", _encode_pil, decode_pil),
        ColumnEncoding("jpeg", _encode_jpeg, _decode_image_file),
        ColumnEncoding("png", _encode_png, _decode_image_file),
        _list_encoding("list[pil]", _encode_pil, decode_pil, reserved=True),
        _list_encoding("list[jpeg]", _encode_jpeg, _decode_image_file, reserved=True),
        _list_encoding("list[png]", _encode_png, _decode_image_file, reserved=True),
        _list_encoding("jpeg_array", _encode_jpeg, _decode_image_file, reserved=False),
        _list_encoding("jpegarray", _encode_jpeg, _decode_image_file, reserved=False),
        ColumnEncoding("json", _encode_json, _decode_json),
        ColumnEncoding("pkl", _encode_pickle, _decode_pickle, unsafe=True),
    ]
    return {encoding.name: encoding for encoding in encodings}


_REGISTRY: dict[str, ColumnEncoding] = _builtin_encodings()


def encoding_names() -> list[str]:
    """Names usable in ``column_encodings``; ``ndarray`` also takes ``:<dtype>[:<shape>]``."""
    return sorted(_REGISTRY)


def get_encoding(name: str) -> ColumnEncoding:
    """Look up an encoding by its index.json name, parsing ndarray parameters."""
    if isinstance(name, str) and name in _REGISTRY:
        return _REGISTRY[name]
    if isinstance(name, str) and name.startswith("ndarray:"):
        return _ndarray_encoding(name)
    raise UnknownEncodingError(
        f"expected a column encoding in {encoding_names()} (ndarray also as 'ndarray:<dtype>[:<d0>,<d1>,...]'), found {name!r}; fix the name, or add your own with stream_plugin.format.encodings.register_encoding(name, encode, decode)"
    )


def is_encoding(name: str) -> bool:
    """Whether ``name`` is a usable column encoding name."""
    try:
        get_encoding(name)
    except UnknownEncodingError:
        return False
    return True


def register_encoding(
    name: str,
    encode: Callable[[Any], bytes],
    decode: Callable[[Buffer], Any],
    *,
    size: int | None = None,
    overwrite: bool = False,
    unsafe: bool = False,
) -> None:
    """Add a custom column encoding; MosaicML can only read it if it has the same one registered."""
    if not isinstance(name, str) or not name or ":" in name or name != name.strip():
        raise EncodingError(
            f"expected an encoding name that is a non-empty string without ':' or surrounding spaces (':' separates parameters), found {name!r}; pick another name"
        )
    if name in _REGISTRY and not overwrite:
        raise EncodingError(
            f"expected a new encoding name, found {name!r} is already registered; pick another name or pass overwrite=True to replace it"
        )
    if not callable(encode) or not callable(decode):
        raise EncodingError(
            f"expected callables for encode and decode of {name!r}, found {type(encode).__name__} and {type(decode).__name__}; pass functions"
        )
    if size is not None and (not isinstance(size, int) or size < 1):
        raise EncodingError(
            f"expected size of {name!r} to be None (variable) or an int >= 1, found {size!r}; fix the size"
        )
    _REGISTRY[name] = ColumnEncoding(name, encode, decode, size=size, unsafe=unsafe)


def unregister_encoding(name: str) -> None:
    """Remove a user encoding (built-ins come back from a fresh registry only); mainly for tests."""
    builtin = _builtin_encodings()
    if name in builtin:
        _REGISTRY[name] = builtin[name]
    else:
        _REGISTRY.pop(name, None)


def encode_value(encoding: ColumnEncoding, value: Any, *, column: str) -> bytes:
    """Encode one column value, with errors that name the column; bytes pass through as is (spec 4)."""
    if isinstance(value, bytes):
        data = value
    else:
        try:
            data = encoding.encode(value)
        except (EncodingError, MissingDependencyError) as exc:
            raise type(exc)(f"column {column!r}: {exc}") from exc
        except (TypeError, ValueError, OverflowError, AttributeError, KeyError, OSError) as exc:
            error = EncodingTypeError if isinstance(exc, (TypeError, AttributeError)) else EncodingError
            raise error(
                f"column {column!r}: encoding {encoding.name!r} could not encode {type(value).__name__} {_short_repr(value)} ({type(exc).__name__}: {exc}); pass a value this encoding accepts or pre-encode it to bytes"
            ) from exc
        if not isinstance(data, bytes):
            raise EncodingError(
                f"column {column!r}: encoding {encoding.name!r} must return bytes, found {type(data).__name__}; fix its encode function"
            )
    if encoding.size is not None and len(data) != encoding.size:
        raise EncodingError(
            f"column {column!r}: encoding {encoding.name!r} stores exactly {encoding.size} bytes per value, found {len(data)} bytes; pass a value of the right size or use a variable-size encoding"
        )
    return data


# --------------------------------------------------------------------------------------------------
# Column types of JSON-lines / CSV / TSV / XSV shards.

TEXT_COLUMN_TYPES: tuple[str, ...] = ("str", "int", "float")


def check_text_column_types(columns: Mapping[str, str], *, fmt: str) -> None:
    """Refuse column types that the text formats cannot store."""
    for column, type_name in columns.items():
        if type_name not in TEXT_COLUMN_TYPES:
            raise UnknownEncodingError(
                f"{fmt} column {column!r}: expected a type in {list(TEXT_COLUMN_TYPES)}, found {type_name!r}; use one of those, or write the dataset as MDS for other types"
            )


def encode_text_value(type_name: str, value: Any, *, column: str) -> str:
    """Format one value as MosaicML does in JSON-lines and CSV/TSV shards."""
    if type_name == "str" and isinstance(value, str):
        return value
    if type_name == "int" and _is_integer(value):
        return str(int(value))
    if type_name == "float" and _is_real(value):
        return repr(float(value))
    if type_name not in TEXT_COLUMN_TYPES:
        raise UnknownEncodingError(
            f"column {column!r}: expected a type in {list(TEXT_COLUMN_TYPES)}, found {type_name!r}; fix the column type"
        )
    expected = {"str": "a str", "int": "an integer", "float": "a real number"}[type_name]
    raise EncodingTypeError(
        f"column {column!r} of type {type_name!r}: expected {expected}, found {type(value).__name__} {_short_repr(value)}; convert the value with {type_name}(...) or change the column type"
    )


def decode_text_value(type_name: str, text: str) -> Any:
    """Parse one stored text value back into ``str``, ``int`` or ``float``."""
    if type_name == "str":
        return text
    if type_name not in ("int", "float"):
        raise UnknownEncodingError(
            f"expected a text column type in {list(TEXT_COLUMN_TYPES)}, found {type_name!r}; fix the column type in index.json"
        )
    try:
        return int(text) if type_name == "int" else float(text)
    except ValueError as exc:
        raise FormatError(
            f"expected {type_name} text in a {type_name!r} column, found {_short_repr(text)}; the shard is corrupt or was written with another column type, re-write it"
        ) from exc
