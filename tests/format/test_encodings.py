"""MDS column encodings: byte compatibility with MosaicML 0.13 fixtures, errors, and the registry."""

from __future__ import annotations

import io
import json
import struct
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from support.paths import FIXTURES_DIR

from stream_plugin.errors import (
    EncodingError,
    EncodingTypeError,
    FormatError,
    MissingDependencyError,
    UnknownEncodingError,
)
from stream_plugin.format.encodings import (
    TEXT_COLUMN_TYPES,
    check_text_column_types,
    decode_text_value,
    encode_text_value,
    encode_value,
    encoding_names,
    get_encoding,
    is_encoding,
    register_encoding,
    unregister_encoding,
)

FIXTURES = FIXTURES_DIR
ALL_ENCODINGS = FIXTURES / "mds-all-encodings"
# Lossy or library-version-dependent encoders: compared by decoded pixels, not by bytes.
NON_DETERMINISTIC = {"jpeg", "png"}


def _split_mds_samples(path: Path, shard: dict[str, Any]) -> Iterator[dict[str, memoryview]]:
    """Yield each sample of an MDS shard as column name -> stored bytes (spec section 3)."""
    data = memoryview(path.read_bytes())
    (count,) = struct.unpack_from("<I", data)
    offsets = struct.unpack_from(f"<{count + 1}I", data, 4)
    sizes = shard["column_sizes"]
    variable = sum(size is None for size in sizes)
    for begin, end in zip(offsets, offsets[1:], strict=False):
        sample = data[begin:end]
        lengths = iter(struct.unpack_from(f"<{variable}I", sample))
        position = 4 * variable
        columns = {}
        for name, size in zip(shard["column_names"], sizes, strict=True):
            length = size if size is not None else next(lengths)
            columns[name] = sample[position : position + length]
            position += length
        assert position == len(sample)
        yield columns


def _fixture_cells() -> list[tuple[str, str, memoryview, dict[str, Any]]]:
    """(column, encoding, stored bytes, manifest description) for every cell of mds-all-encodings."""
    index = json.loads((ALL_ENCODINGS / "index.json").read_text())
    expected = json.loads((FIXTURES / "manifest.json").read_text())["datasets"]["mds-all-encodings"][
        "samples"
    ]
    stored = []
    for shard in index["shards"]:
        encodings = dict(zip(shard["column_names"], shard["column_encodings"], strict=True))
        for sample in _split_mds_samples(ALL_ENCODINGS / shard["raw_data"]["basename"], shard):
            stored.append((encodings, sample))
    assert len(stored) == len(expected)
    return [
        (column, encodings[column], sample[column], want[column])
        for (encodings, sample), want in zip(stored, expected, strict=True)
        for column in sorted(sample)
    ]


CELLS = _fixture_cells()


def _assert_matches_manifest(value: Any, want: dict[str, Any]) -> None:
    kind = want["type"]
    if kind == "bytes":
        assert isinstance(value, bytes) and value.hex() == want["hex"]
    elif kind in ("str", "int", "float"):
        assert type(value).__name__ == kind and value == want["value"]
    elif kind == "numpy_scalar":
        assert isinstance(value, np.generic) and value.dtype == np.dtype(want["dtype"])
        assert value == want["value"]
    elif kind == "ndarray":
        assert value.dtype == np.dtype(want["dtype"]) and list(value.shape) == want["shape"]
        assert value.ravel().tolist() == want["values"]
    elif kind == "decimal":
        assert value == Decimal(want["value"]) and isinstance(value, Decimal)
    elif kind == "image":
        assert value.mode == want["mode"] and list(value.size) == want["size"]
        assert abs(np.asarray(value.convert("RGB"), np.float64).mean() - want["rgb_mean"]) <= 1.0
    elif kind == "json":
        assert json.loads(json.dumps(value)) == want["value"]
    else:
        raise AssertionError(f"unknown manifest type {kind}")


@pytest.mark.parametrize("column", sorted({cell[0] for cell in CELLS}))
def test_fixture_column_decodes_to_the_values_mosaicml_read(column: str) -> None:
    cells = [cell for cell in CELLS if cell[0] == column]
    for _, name, data, want in cells:
        _assert_matches_manifest(get_encoding(name).decode(data), want)


@pytest.mark.parametrize("column", sorted({cell[0] for cell in CELLS if cell[1] not in NON_DETERMINISTIC}))
def test_fixture_column_reencodes_to_the_same_bytes(column: str) -> None:
    for _, name, data, _ in (cell for cell in CELLS if cell[0] == column):
        encoding = get_encoding(name)
        assert encode_value(encoding, encoding.decode(data), column=column) == bytes(data)


@pytest.mark.parametrize("name", sorted(NON_DETERMINISTIC))
def test_fixture_images_reencode_to_the_same_pixels(name: str) -> None:
    encoding = get_encoding(name)
    for _, _, data, _ in (cell for cell in CELLS if cell[1] == name):
        image = encoding.decode(data)
        again = encoding.decode(encode_value(encoding, image, column=name))
        before, after = np.asarray(image, np.float64), np.asarray(again, np.float64)
        if name == "png":
            assert np.array_equal(before, after)
        else:  # lossy: the manifest's own tolerance on the mean
            assert abs(before.mean() - after.mean()) <= 1.0


def test_fixture_column_sizes_match_the_encodings_fixed_sizes() -> None:
    shard = json.loads((ALL_ENCODINGS / "index.json").read_text())["shards"][0]
    assert [get_encoding(name).size for name in shard["column_encodings"]] == shard["column_sizes"]


def test_ndarray_decode_is_a_read_only_view_on_the_given_buffer() -> None:
    encoding = get_encoding("ndarray")
    buffer = bytearray(encoding.encode(np.arange(6, dtype=np.int32).reshape(2, 3)))
    array = encoding.decode(memoryview(buffer))
    buffer[-4:] = struct.pack("<i", 99)
    assert array[1, 2] == 99  # shares memory: no copy was made
    assert not array.flags.writeable


@pytest.mark.parametrize(
    ("name", "array", "expected"),
    [
        ("ndarray", np.array([1, 2], np.int16), b"\x11\x04\x02\x01\x00\x02\x00"),
        ("ndarray", np.zeros((1, 300), np.uint8), b"\x08\x09\x01\x00\x2c\x01" + bytes(300)),
        ("ndarray", np.zeros(70000, np.uint8), b"\x08\x06\x70\x11\x01\x00" + bytes(70000)),
        ("ndarray:float32", np.array([1.0], np.float32), b"\x04\x01" + struct.pack("<f", 1.0)),
        ("ndarray:uint8:2,3", np.arange(6, dtype=np.uint8).reshape(2, 3), bytes(range(6))),
    ],
)
def test_ndarray_writes_dtype_byte_and_shape_header_only_when_the_name_lacks_them(
    name: str, array: np.ndarray, expected: bytes
) -> None:
    encoding = get_encoding(name)
    assert encoding.encode(array) == expected
    assert np.array_equal(encoding.decode(expected), array)


def test_ndarray_decodes_every_shape_header_width() -> None:
    encoding = get_encoding("ndarray:uint8")
    for width, code in (("B", 0), ("H", 1), ("I", 2), ("Q", 3)):
        stored = bytes([(2 << 2) | code]) + struct.pack(f"<2{width}", 1, 3) + bytes([7, 8, 9])
        assert encoding.decode(stored).tolist() == [[7, 8, 9]]


def test_ndarray_stores_big_endian_input_as_little_endian() -> None:
    encoding = get_encoding("ndarray:int32")
    big = np.array([1, 2], dtype=">i4")
    assert encoding.encode(big) == encoding.encode(np.array([1, 2], dtype="<i4"))


def test_fixed_ndarray_name_exposes_size_dtype_and_shape_for_batch_decoding() -> None:
    encoding = get_encoding("ndarray:float64:4,5")
    assert (encoding.size, encoding.numpy_dtype, encoding.shape) == (160, np.dtype("<f8"), (4, 5))
    assert get_encoding("ndarray:float64").size is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("ndarray:complex64", r"dtype one of .*'float16'.*found 'ndarray:complex64'"),
        ("ndarray:uint8:2,0", r"integers >= 1, found '2,0'"),
        ("ndarray:uint8:a", r"integers >= 1, found 'a'"),
        ("ndarray:uint8:2:3", r"found 'ndarray:uint8:2:3'"),
        ("nope", r"expected a column encoding in \[.*'bytes'.*found 'nope'.*register_encoding"),
    ],
)
def test_unknown_or_malformed_encoding_names_are_refused(name: str, message: str) -> None:
    with pytest.raises(UnknownEncodingError, match=message):
        get_encoding(name)
    assert not is_encoding(name)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("str", 5, r"column 'c': encoding 'str' expects a str, found int 5; convert"),
        (
            "int",
            2**63,
            r"expects an integer in the int64 range, found int 9223372036854775808; use 'str_int'",
        ),
        ("int", 1.5, r"expects an integer in the int64 range, found float"),
        ("uint8", 256, r"'uint8' expects an integer in \[0, 255\], found int 256; use a wider"),
        ("int8", -129, r"expects an integer in \[-128, 127\], found int -129"),
        ("float32", "x", r"'float32' expects a real number, found str 'x'"),
        ("str_int", True, r"'str_int' expects an integer, found bool True"),
        ("str_float", "1.0", r"'str_float' expects a float, found str"),
        ("str_decimal", 1.5, r"expects a decimal.Decimal, found float 1.5; wrap the value as Decimal"),
        ("json", {1, 2}, r"'json' expects a JSON-serialisable object .*found set"),
        ("ndarray", [1, 2], r"expects a numpy.ndarray, found list"),
        ("ndarray", np.array([1 + 2j]), r"dtype in .*found dtype complex128.*astype"),
        ("ndarray:int32", np.array([1], np.int64), r"dtype int32 \(found dtype int64\).*astype\('int32'\)"),
        ("ndarray:uint8:2,3", np.zeros((3, 2), np.uint8), r"shape \(2, 3\) \(found shape \(3, 2\)\)"),
        ("ndarray", np.zeros((0,), np.uint8), r"1 to 63 dims, each >= 1 \(found shape \(0,\)\)"),
        ("ndarray", np.array(5, np.uint8), r"found shape \(\)\).*use a scalar encoding"),
        ("pil", "img", r"'pil' expects a PIL.Image.Image, found str"),
        ("list[png]", Image.new("RGB", (1, 1)), r"'list\[png\]' expects a list of PIL images"),
    ],
)
def test_values_of_the_wrong_type_raise_an_error_naming_column_encoding_and_both_types(
    name: str, value: Any, message: str
) -> None:
    with pytest.raises(EncodingError, match=message):
        encode_value(get_encoding(name), value, column="c")


def test_image_pillow_cannot_save_in_the_format_is_reported_with_the_column() -> None:
    with pytest.raises(
        EncodingError, match=r"column 'c': encoding 'jpeg' could not encode .*RGBA.*pre-encode it"
    ):
        encode_value(get_encoding("jpeg"), Image.new("RGBA", (2, 2)), column="c")


@pytest.mark.parametrize(
    ("name", "data"),
    [("ndarray", b"\x07\x04\x01\x00"), ("ndarray", b"\x08\x04\x05\x00"), ("ndarray:uint8:2,3", b"\x00")],
)
def test_corrupt_ndarray_bytes_are_a_format_error(name: str, data: bytes) -> None:
    with pytest.raises(
        FormatError, match=rf"expected a '{name}' value .*found {len(data)} bytes that do not parse"
    ):
        get_encoding(name).decode(data)


def test_bytes_values_are_stored_as_is_for_any_encoding() -> None:
    assert encode_value(get_encoding("json"), b"raw", column="c") == b"raw"
    assert encode_value(get_encoding("uint16"), b"\x01\x02", column="c") == b"\x01\x02"


def test_bytes_of_the_wrong_length_for_a_fixed_size_encoding_are_refused() -> None:
    with pytest.raises(
        EncodingError, match=r"column 'c': encoding 'float64' stores exactly 8 bytes per value, found 3 bytes"
    ):
        encode_value(get_encoding("float64"), b"abc", column="c")


def test_numeric_scalars_decode_to_numpy_scalars_and_int_to_python_int() -> None:
    assert type(get_encoding("float16").decode(np.float16(0.5).tobytes())) is np.float16
    assert type(get_encoding("uint64").decode(b"\xff" * 8)) is np.uint64
    assert get_encoding("int").decode(struct.pack("<q", -5)) == -5
    assert type(get_encoding("int").decode(struct.pack("<q", -5))) is int


def test_int_accepts_numpy_integers() -> None:
    assert encode_value(get_encoding("int"), np.int32(-7), column="c") == struct.pack("<q", -7)


def test_str_float_round_trips_special_values() -> None:
    encoding = get_encoding("str_float")
    assert encoding.encode(float("inf")) == b"inf"
    assert encoding.decode(encoding.encode(0.1)) == 0.1


def test_pil_list_and_jpeg_array_layouts_follow_the_spec() -> None:
    images = [Image.new("RGB", (2, 1), (10, 20, 30)), Image.new("L", (1, 3), 7)]
    pil = get_encoding("pil")
    stored = get_encoding("list[pil]").encode(images)
    first, second = pil.encode(images[0]), pil.encode(images[1])
    assert stored == struct.pack("<IIII", 0, 2, len(first), len(second)) + first + second
    decoded = get_encoding("list[pil]").decode(memoryview(stored))
    assert [(im.mode, im.size, im.tobytes()) for im in decoded] == [
        (im.mode, im.size, im.tobytes()) for im in images
    ]

    jpeg_bytes = get_encoding("jpeg").encode(images[0])
    for name in ("jpeg_array", "jpegarray"):
        array = get_encoding(name).encode([images[0], jpeg_bytes])
        assert array == struct.pack("<III", 2, len(jpeg_bytes), len(jpeg_bytes)) + jpeg_bytes * 2
        assert [im.size for im in get_encoding(name).decode(array)] == [(2, 1), (2, 1)]


def test_jpeg_array_accepts_a_list_of_jpeg_bytes_as_mosaicml_does() -> None:
    jpegs = [get_encoding("jpeg").encode(Image.new("RGB", (size, 2), (9, 9, 9))) for size in (3, 5)]
    stored = get_encoding("jpeg_array").encode([jpegs[0], bytearray(jpegs[1])])
    assert stored == struct.pack("<III", 2, len(jpegs[0]), len(jpegs[1])) + jpegs[0] + jpegs[1]
    assert [im.size for im in get_encoding("jpeg_array").decode(memoryview(stored))] == [(3, 2), (5, 2)]


@pytest.mark.parametrize("name", ["list[jpeg]", "list[png]"])
def test_image_file_lists_round_trip(name: str) -> None:
    images = [Image.new("RGB", (4, 4), (200, 0, 0)), Image.new("RGB", (3, 2), (0, 0, 200))]
    decoded = get_encoding(name).decode(get_encoding(name).encode(images))
    assert [im.size for im in decoded] == [(4, 4), (3, 2)]
    assert struct.unpack_from("<II", get_encoding(name).encode(images)) == (0, 2)


def test_jpeg_of_an_opened_jpeg_file_stores_the_file_bytes(tmp_path: Path) -> None:
    path = tmp_path / "a.jpg"
    Image.new("RGB", (8, 8), (1, 2, 3)).save(path, quality=30)
    with Image.open(path) as image:
        assert get_encoding("jpeg").encode(image) == path.read_bytes()


def test_jpeg_of_an_in_memory_image_uses_quality_75() -> None:
    # A fixed noise image: re-encoding a decoded JPEG gives the same bytes for most images but not all
    # (Image.effect_noise is unseeded, and about 1 in 50 of its images failed the last line).
    pixels = np.random.default_rng(0).normal(128, 40, (16, 16)).clip(0, 255).astype(np.uint8)
    image = Image.fromarray(pixels, "L").convert("RGB")
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=75)
    assert get_encoding("jpeg").encode(image) == out.getvalue()
    decoded = get_encoding("jpeg").decode(out.getvalue())
    assert get_encoding("jpeg").encode(decoded) == out.getvalue()  # no filename: re-encoded, not opened


def test_pkl_is_marked_unsafe_and_nothing_else_builtin_is() -> None:
    assert [name for name in encoding_names() if get_encoding(name).unsafe] == ["pkl"]


def test_missing_pillow_raises_missing_dependency_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(
        MissingDependencyError, match=r"column 'img': image encodings .*pip install 'stream-plugin\[pillow\]'"
    ):
        encode_value(get_encoding("png"), object(), column="img")
    with pytest.raises(MissingDependencyError, match=r"need Pillow"):
        get_encoding("pil").decode(b"\0" * 12)


def test_encoding_names_lists_every_spec_encoding() -> None:
    expected = {"bytes", "str", "int", "str_int", "str_float", "str_decimal", "ndarray", "pil", "jpeg", "png"}
    expected |= {"list[pil]", "list[jpeg]", "list[png]", "jpeg_array", "jpegarray", "json", "pkl"}
    expected |= {f"{kind}{bits}" for kind in ("int", "uint") for bits in (8, 16, 32, 64)}
    expected |= {"float16", "float32", "float64"}
    assert set(encoding_names()) == expected


@pytest.fixture
def registered() -> Iterator[str]:
    name = "test_reversed"
    register_encoding(name, lambda value: value.encode()[::-1], lambda data: bytes(data)[::-1].decode())
    yield name
    unregister_encoding(name)


def test_registered_encoding_is_usable_by_name(registered: str) -> None:
    encoding = get_encoding(registered)
    assert encode_value(encoding, "abc", column="c") == b"cba"
    assert encoding.decode(b"cba") == "abc"
    assert registered in encoding_names()


def test_registering_a_taken_name_needs_overwrite(registered: str) -> None:
    with pytest.raises(EncodingError, match=r"found 'test_reversed' is already registered; .*overwrite=True"):
        register_encoding(registered, str.encode, bytes.decode)
    register_encoding(registered, str.encode, bytes.decode, overwrite=True)
    assert get_encoding(registered).decode(b"abc") == "abc"


def test_registering_a_parametrised_name_is_refused() -> None:
    with pytest.raises(EncodingError, match=r"without ':' .*found 'a:b'"):
        register_encoding("a:b", str.encode, bytes.decode)


def test_unregistering_a_builtin_restores_it() -> None:
    register_encoding("str", lambda value: b"x", lambda data: "x", overwrite=True)
    unregister_encoding("str")
    assert get_encoding("str").encode("é") == "é".encode()


def test_failing_custom_encoder_is_reported_with_the_column(registered: str) -> None:
    with pytest.raises(
        EncodingError, match=r"column 'c': encoding 'test_reversed' could not encode int 5 \(AttributeError"
    ):
        encode_value(get_encoding(registered), 5, column="c")


def test_text_column_types_are_checked_per_format() -> None:
    check_text_column_types({"a": "str", "b": "int", "c": "float"}, fmt="csv")
    assert TEXT_COLUMN_TYPES == ("str", "int", "float")
    with pytest.raises(
        UnknownEncodingError,
        match=r"json column 'b': expected a type in \['str', 'int', 'float'\], found 'bytes'",
    ):
        check_text_column_types({"a": "str", "b": "bytes"}, fmt="json")


@pytest.mark.parametrize(
    ("type_name", "value", "text"),
    [
        ("str", "w0", "w0"),
        ("int", 42, "42"),
        ("int", np.int64(-3), "-3"),
        ("float", 0.1, "0.1"),
        ("float", 2, "2.0"),
    ],
)
def test_text_values_format_like_mosaicml_and_parse_back(type_name: str, value: Any, text: str) -> None:
    assert encode_text_value(type_name, value, column="c") == text
    assert decode_text_value(type_name, text) == value


def test_text_value_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(
        EncodingError, match=r"column 'n' of type 'int': expected an integer, found str '3'; convert"
    ):
        encode_text_value("int", "3", column="n")
    with pytest.raises(EncodingError, match=r"expected an integer, found bool True"):
        encode_text_value("int", True, column="n")


def test_unparsable_text_value_is_a_format_error() -> None:
    with pytest.raises(FormatError, match=r"expected float text in a 'float' column, found 'abc'"):
        decode_text_value("float", "abc")
    with pytest.raises(UnknownEncodingError, match=r"found 'bytes'"):
        decode_text_value("bytes", "abc")


def test_csv_fixture_values_decode_to_the_manifest() -> None:
    lines = (FIXTURES / "csv-basic" / "shard.00000.csv").read_text().splitlines()
    header = lines[0].split(",")
    columns = json.loads((FIXTURES / "manifest.json").read_text())["datasets"]["csv-basic"]["columns"]
    samples = json.loads((FIXTURES / "manifest.json").read_text())["datasets"]["csv-basic"]["samples"]
    for line, want in zip(lines[1:], samples, strict=True):
        decoded = {
            name: decode_text_value(columns[name], text)
            for name, text in zip(header, line.split(","), strict=True)
        }
        assert decoded == {name: cell["value"] for name, cell in want.items()}
        assert line == ",".join(
            encode_text_value(columns[name], decoded[name], column=name) for name in header
        )


@pytest.mark.parametrize(
    ("name", "value"),
    [("bytes", "9"), ("str", 25), ("int", 25.9), ("uint16", "7"), ("float32", "x"), ("pil", 9.5),
     ("jpeg", 12.5), ("png", 77.7), ("jpeg_array", 123), ("list[jpeg]", None), ("ndarray", [1, 2])],
)  # fmt: skip
def test_a_value_of_the_wrong_type_is_also_an_attribute_error_as_in_mosaicml(name: str, value: Any) -> None:
    """MosaicML raises AttributeError for these; ``except AttributeError`` written for it still catches ours.
    (Bytes are stored as given for any encoding, spec section 4, so they are not a wrong type here.)"""
    with pytest.raises(EncodingTypeError) as caught:
        encode_value(get_encoding(name), value, column="c")
    assert isinstance(caught.value, AttributeError) and isinstance(caught.value, TypeError)
    assert isinstance(caught.value, ValueError)  # still an EncodingError


def test_a_text_value_of_the_wrong_type_is_also_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        encode_text_value("int", "27", column="c")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("int", 2**63),
        ("uint8", 256),
        ("ndarray:uint8:2,3", np.zeros((3, 2), np.uint8)),
        ("ndarray", np.array(5)),
    ],
)
def test_a_value_of_the_right_type_that_does_not_fit_is_a_value_error_only(name: str, value: Any) -> None:
    with pytest.raises(EncodingError) as caught:
        encode_value(get_encoding(name), value, column="c")
    assert not isinstance(caught.value, (AttributeError, TypeError))


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        (np.array(0.5), "Attempting to encode a scalar with NDArray encoding"),
        (np.zeros((0,), np.uint8), "Attempting to encode a numpy array with 0 elements"),
    ],
)
def test_ndarray_errors_hold_mosaicmls_phrases(value: Any, phrase: str) -> None:
    with pytest.raises(EncodingError, match=phrase):
        encode_value(get_encoding("ndarray"), value, column="c")
