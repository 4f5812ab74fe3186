"""``decode="tensor"``: image columns read as (C, H, W) uint8 tensors, PIL's pixels, by either backend.

The Pillow backend runs everywhere (the main environment's CPU torch has no matching torchvision); the
torchvision one where torchvision imports (the benchmarks' environment), checked against the Pillow one.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from stream_plugin import MDSWriter
from stream_plugin.errors import ConfigError, ConfigTypeError, FormatError
from stream_plugin.format.image_decode import (
    IMAGE_DECODES,
    decode_image_tensor,
    decode_image_tensor_with_pil,
    image_tensor_backend,
)
from stream_plugin.format.index import load_index
from stream_plugin.format.read_options import ReadOptions, check_decode_columns, normalize_decode
from stream_plugin.format.reader import open_shard


def _image(mode: str, size: tuple[int, int] = (13, 7), seed: int = 0) -> Image.Image:
    """A small random image of ``mode`` (width 13, height 7: not square, so a transposition shows)."""
    rng = np.random.default_rng(seed)
    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[mode]
    pixels = rng.integers(0, 256, size=(size[1], size[0], channels), dtype=np.uint8)
    return Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode)


def _encoded(image: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def _pil_pixels_chw(data: bytes) -> np.ndarray:
    pixels = np.asarray(Image.open(io.BytesIO(data)))
    return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)


@pytest.mark.parametrize("mode", ["L", "LA", "RGB", "RGBA"])
def test_png_tensor_equals_pils_pixels_exactly(mode: str) -> None:
    data = _encoded(_image(mode), "PNG")
    tensor = decode_image_tensor_with_pil(memoryview(data))
    assert tensor.dtype == torch.uint8
    assert tuple(tensor.shape) == (len(mode), 7, 13)  # (C, H, W)
    assert tensor.is_contiguous()
    np.testing.assert_array_equal(tensor.numpy(), _pil_pixels_chw(data))


@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_jpeg_tensor_equals_pils_pixels(mode: str) -> None:
    data = _encoded(_image(mode, (40, 24)), "JPEG")
    tensor = decode_image_tensor_with_pil(data)
    assert tuple(tensor.shape) == (len(mode), 24, 40)
    np.testing.assert_array_equal(tensor.numpy(), _pil_pixels_chw(data))


def test_palette_png_is_expanded_to_rgb() -> None:
    rgb = _image("RGB")
    palette = rgb.convert("P")
    tensor = decode_image_tensor_with_pil(_encoded(palette, "PNG"))
    np.testing.assert_array_equal(tensor.numpy(), np.asarray(palette.convert("RGB")).transpose(2, 0, 1))


def test_a_16_bit_image_is_refused_with_the_fix() -> None:
    data = _encoded(Image.fromarray(np.arange(12, dtype=np.uint16).reshape(3, 4) * 1000), "PNG")
    with pytest.raises(FormatError, match=r"expected an 8-bit image .* found mode 'I;16'.*decode='pil'"):
        decode_image_tensor_with_pil(data)


def test_the_backend_is_torchvision_where_it_imports_else_pil() -> None:
    try:
        import torchvision.io  # noqa: F401
    except Exception:  # noqa: BLE001 - absent, or built for another torch: the Pillow fallback
        assert image_tensor_backend() == "pil"
    else:
        assert image_tensor_backend() == "torchvision"


@pytest.mark.parametrize(("mode", "fmt"), [("RGB", "PNG"), ("RGBA", "PNG"), ("L", "PNG"), ("RGB", "JPEG")])
def test_the_backend_in_use_gives_pils_pixels(mode: str, fmt: str) -> None:
    data = _encoded(_image(mode, (32, 16)), fmt)
    tensor = decode_image_tensor(memoryview(data))
    reference = _pil_pixels_chw(data).astype(np.int16)
    assert tensor.dtype == torch.uint8 and tuple(tensor.shape) == reference.shape
    # PNG is lossless: exact. JPEG decoders may round their IDCT differently: a level or two.
    tolerance = 0 if fmt == "PNG" else 2
    assert int(np.abs(tensor.numpy().astype(np.int16) - reference).max()) <= tolerance


def _write_images(folder: Path) -> list[Image.Image]:
    images = [_image("RGB", (16, 8), seed) for seed in range(3)]
    columns = {"photo": "jpeg", "scan": "png", "album": "list[png]", "label": "int", "raw": "bytes"}
    with MDSWriter(out=str(folder), columns=columns) as writer:
        for index, image in enumerate(images):
            writer.write({"photo": image, "scan": image, "album": [image, image], "label": index, "raw": b"x"})
    return images


def test_a_shard_read_with_decode_tensor_gives_tensors_for_every_image_column(tmp_path: Path) -> None:
    images = _write_images(tmp_path)
    (entry,) = load_index(tmp_path / "index.json")
    reader = open_shard(entry, tmp_path, read_options=ReadOptions(decode="tensor"))
    sample = reader.read(1)
    assert isinstance(sample["photo"], torch.Tensor) and tuple(sample["photo"].shape) == (3, 8, 16)
    np.testing.assert_array_equal(sample["scan"].numpy(), np.asarray(images[1]).transpose(2, 0, 1))
    assert [tuple(item.shape) for item in sample["album"]] == [(3, 8, 16), (3, 8, 16)]
    assert sample["label"] == 1 and sample["raw"] == b"x"  # other columns as before
    (column,) = [reader.read_columns([0, 2])["scan"]]
    assert [tuple(item.shape) for item in column] == [(3, 8, 16), (3, 8, 16)]
    reader.close()


def test_decode_per_column_leaves_the_other_image_columns_as_pil(tmp_path: Path) -> None:
    _write_images(tmp_path)
    (entry,) = load_index(tmp_path / "index.json")
    reader = open_shard(entry, tmp_path, read_options=ReadOptions(decode=normalize_decode({"scan": "tensor"})))
    sample = reader.read(0)
    assert isinstance(sample["scan"], torch.Tensor)
    assert isinstance(sample["photo"], Image.Image)
    reader.close()


def test_decode_pil_is_the_default_as_mosaicml(tmp_path: Path) -> None:
    _write_images(tmp_path)
    (entry,) = load_index(tmp_path / "index.json")
    reader = open_shard(entry, tmp_path)
    assert isinstance(reader.read(0)["photo"], Image.Image)
    reader.close()


def test_the_decode_choices_are_pil_and_tensor() -> None:
    assert IMAGE_DECODES == ("pil", "tensor")


@pytest.mark.parametrize(
    ("decode", "error", "message"),
    [
        ("torch", ConfigError, r"decode: expected one of \['pil', 'tensor'\], found 'torch'"),
        ({"image": "cv2"}, ConfigError, r"decode\['image'\]: expected one of \['pil', 'tensor'\], found 'cv2'"),
        (3, ConfigTypeError, r"decode: expected one of .* or a dict of column name -> one of them, found int 3"),
        ({1: "tensor"}, ConfigTypeError, r"decode: expected str column names, found int 1"),
    ],
)
def test_a_bad_decode_value_is_refused_with_the_choices(decode: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        normalize_decode(decode)


def test_decode_tensor_for_a_column_without_images_is_refused(tmp_path: Path) -> None:
    _write_images(tmp_path)
    entries = load_index(tmp_path / "index.json")
    with pytest.raises(ConfigError, match=r"decode=\{'label': 'tensor'\} expects an image column .* found encoding 'int'"):
        check_decode_columns((("label", "tensor"),), entries, source="here")
    with pytest.raises(ConfigError, match=r"decode names column 'imag', expected one of the dataset's columns \['album', 'label', 'photo', 'raw', 'scan'\]"):
        check_decode_columns((("imag", "tensor"),), entries, source="here")
    check_decode_columns((("photo", "tensor"), ("label", "pil")), entries, source="here")  # fine
