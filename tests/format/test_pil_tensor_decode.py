"""``decode="tensor"`` for MosaicML's raw ``pil`` encoding: the stored pixels as a (C, H, W) uint8 tensor.

The reference is the ``decode="pil"`` read of the same shard: its image's pixels (``np.asarray``, what
``pil_to_tensor`` returns, channels first), expanded as ``decode_image_tensor_with_pil`` expands a file
for the modes torch cannot hold as they are.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from stream_plugin import MDSWriter, StreamingDataset
from stream_plugin.errors import ConfigError, FormatError
from stream_plugin.format import encodings
from stream_plugin.format.image_decode import decode_pil_tensor
from stream_plugin.format.index import load_index
from stream_plugin.format.read_options import ReadOptions, check_decode_columns
from stream_plugin.format.reader import open_shard

_CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


def _image(mode: str, size: tuple[int, int], seed: int = 0) -> Image.Image:
    """A random 8-bit image of ``mode`` and ``size`` (width, height)."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], _CHANNELS[mode]), dtype=np.uint8)
    return Image.fromarray(pixels.squeeze(-1) if mode == "L" else pixels, mode)


def _chw(image: Image.Image) -> np.ndarray:
    pixels = np.asarray(image)
    return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)  # (C, H, W)


def _read_both(folder: Path, images: list[Image.Image], column: str = "pil") -> list[tuple[object, object]]:
    """Each image written to a ``column``-encoded shard, read back with ``decode="pil"`` and ``"tensor"``."""
    with MDSWriter(out=str(folder), columns={"image": column}) as writer:
        for image in images:
            writer.write({"image": [image, image] if column == "list[pil]" else image})
    (entry,) = load_index(folder / "index.json")
    as_pil = open_shard(entry, folder)
    as_tensor = open_shard(entry, folder, read_options=ReadOptions(decode="tensor"))
    pairs = [(as_pil.read(index)["image"], as_tensor.read(index)["image"]) for index in range(len(images))]
    as_pil.close()
    as_tensor.close()
    return pairs


@pytest.mark.parametrize("mode", ["L", "LA", "RGB", "RGBA"])
@pytest.mark.parametrize("size", [(13, 7), (7, 5), (1, 1)])
def test_pil_tensor_equals_the_pil_reads_pixels_for_each_8_bit_mode(
    tmp_path: Path, mode: str, size: tuple[int, int]
) -> None:
    ((pil_image, tensor),) = _read_both(tmp_path, [_image(mode, size)])
    assert isinstance(pil_image, Image.Image) and isinstance(tensor, torch.Tensor)
    assert tensor.dtype == torch.uint8 and tuple(tensor.shape) == (len(mode), size[1], size[0])
    assert tensor.is_contiguous()
    np.testing.assert_array_equal(tensor.numpy(), _chw(pil_image))


def test_pil_tensor_of_an_8_bit_mode_builds_no_pil_image(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encodings.get_encoding("pil").encode(_image("RGB", (6, 4)))

    def refuse(_: object) -> None:
        raise AssertionError("decode_pil_tensor built a PIL image for an RGB value")

    monkeypatch.setattr(encodings, "decode_pil", refuse)
    tensor = decode_pil_tensor(memoryview(data))
    np.testing.assert_array_equal(tensor.numpy(), _chw(_image("RGB", (6, 4))))


def test_pil_tensor_owns_its_memory_and_is_writable(tmp_path: Path) -> None:
    ((_, tensor),) = _read_both(tmp_path, [_image("RGBA", (5, 3))])
    assert isinstance(tensor, torch.Tensor)
    tensor[0, 0, 0] = 7  # a view of the read-only map would refuse this (or warn)
    assert int(tensor[0, 0, 0]) == 7


@pytest.mark.parametrize(
    ("mode", "expanded"),
    [("1", "L"), ("P", "RGB"), ("CMYK", "RGB"), ("YCbCr", "RGB"), ("La", "LA"), ("RGBa", "RGBA"), ("PA", "RGBA")],
)
def test_pil_tensor_of_other_modes_is_expanded_as_for_image_files(tmp_path: Path, mode: str, expanded: str) -> None:
    source = _image("RGBA", (7, 5)) if mode in ("La", "RGBa", "PA") else _image("RGB", (7, 5))
    ((pil_image, tensor),) = _read_both(tmp_path, [source.convert(mode)])
    assert isinstance(pil_image, Image.Image) and isinstance(tensor, torch.Tensor)
    assert pil_image.mode == mode
    np.testing.assert_array_equal(tensor.numpy(), _chw(pil_image.convert(expanded)))


@pytest.mark.parametrize("mode", ["I;16", "I", "F"])
def test_pil_tensor_of_a_wider_than_8_bit_mode_is_refused_with_the_fix(tmp_path: Path, mode: str) -> None:
    image = Image.fromarray(np.arange(12, dtype=np.uint16).reshape(3, 4) * 1000).convert(mode)
    data = encodings.get_encoding("pil").encode(image)
    with pytest.raises(FormatError, match=rf"expected an 8-bit image .* found mode '{mode}'.*decode='pil'"):
        decode_pil_tensor(data)


def test_list_pil_column_decodes_to_a_list_of_tensors(tmp_path: Path) -> None:
    images = [_image("RGB", (7, 5), seed) for seed in range(3)]
    for (pil_images, tensors), image in zip(_read_both(tmp_path, images, "list[pil]"), images):
        assert isinstance(pil_images, list) and isinstance(tensors, list) and len(tensors) == 2
        for pil_image, tensor in zip(pil_images, tensors):
            assert isinstance(tensor, torch.Tensor)
            np.testing.assert_array_equal(tensor.numpy(), _chw(pil_image))
            np.testing.assert_array_equal(tensor.numpy(), _chw(image))


def test_a_damaged_pil_value_is_refused_with_the_sizes() -> None:
    data = encodings.get_encoding("pil").encode(_image("RGB", (4, 3)))
    with pytest.raises(FormatError, match=r"expected 36 bytes of pixels after the header of a 4x3 RGB 'pil' value, found 35"):
        decode_pil_tensor(data[:-1])
    header = struct.pack("<III", 4, 3, 3) + b"RGB"
    with pytest.raises(FormatError, match=r"expected 36 bytes .* found 37; the value is damaged"):
        decode_pil_tensor(header + bytes(37))


def test_decode_tensor_accepts_pil_columns(tmp_path: Path) -> None:
    images = [_image("RGB", (7, 5), seed) for seed in range(4)]
    columns = {"raw": "pil", "album": "list[pil]", "label": "int"}
    with MDSWriter(out=str(tmp_path), columns=columns) as writer:
        for index, image in enumerate(images):
            writer.write({"raw": image, "album": [image], "label": index})
    entries = load_index(tmp_path / "index.json")
    check_decode_columns((("album", "tensor"), ("raw", "tensor")), entries, source="here")  # no error
    with pytest.raises(ConfigError, match=r"decode=\{'label': 'tensor'\} expects an image column \(encoding in \[.*'pil', 'list\[pil\]'\]\)"):
        check_decode_columns((("label", "tensor"),), entries, source="here")
    dataset = StreamingDataset(local=str(tmp_path), batch_size=2, decode={"raw": "tensor"})
    samples = list(dataset)
    assert [type(sample["raw"]) for sample in samples] == [torch.Tensor] * 4
    assert [type(sample["album"][0]) for sample in samples] == [Image.Image] * 4  # not named: stays PIL
    for sample in samples:
        np.testing.assert_array_equal(sample["raw"].numpy(), _chw(images[sample["label"]]))
