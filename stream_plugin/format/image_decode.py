"""Image columns decoded to uint8 tensors instead of PIL images: the ``decode=`` option's choices and coders.

MosaicML Streaming decodes ``jpeg`` and ``png`` columns to PIL images, and so do we by default
(``"pil"``). ``"tensor"`` decodes them straight to a ``torch.uint8`` tensor of shape ``(C, H, W)``, as
``torchvision.io.decode_image`` returns it: with torchvision installed, it is the decoder
(``ImageReadMode.UNCHANGED``); without it, Pillow decodes and numpy hands its pixels to torch
(``image_tensor_backend`` says which one a process uses). Both give the same pixels for PNG; JPEG
decoders may differ by a level or two where their IDCTs differ. Palette and 1-bit images come out as
RGB (RGBA with transparency) and grayscale, as torchvision expands them.

MosaicML's ``pil`` encoding stores no file but a header and the raw pixels (``encodings.read_pil_header``).
``"tensor"`` reads the 8-bit modes (L, LA, RGB, RGBA) straight from those pixels into a tensor, without
building a PIL image: the pixels of ``decode="pil"``'s image, exactly. Other modes go through the PIL
image and are expanded as above (a palette image's palette is not stored, as in MosaicML).

torch (and torchvision) are imported on the first decode only: the format package itself is torch-free.
"""

from __future__ import annotations

import functools
import io
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from stream_plugin.errors import FormatError, MissingDependencyError

if TYPE_CHECKING:
    import torch
    from PIL import Image as PILImage

__all__ = [
    "IMAGE_DECODES",
    "TENSOR_DECODABLE",
    "TENSOR_DECODERS",
    "ImageDecode",
    "decode_image_tensor",
    "decode_image_tensor_with_pil",
    "decode_pil_tensor",
    "image_tensor_backend",
]

ImageDecode = Literal["pil", "tensor"]
IMAGE_DECODES: tuple[str, ...] = get_args(ImageDecode)  # the one list of the option's values

Buffer = bytes | memoryview

# Pillow modes torch can hold as they are (channels last), and those expanded as torchvision expands them.
_KEPT_MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}
_EXPANDED_MODES = {"1": "L", "P": "RGB", "PA": "RGBA", "CMYK": "RGB", "YCbCr": "RGB", "La": "LA", "RGBa": "RGBA"}


def decode_image_tensor(data: Buffer) -> torch.Tensor:
    """An encoded JPEG or PNG as a ``(C, H, W)`` uint8 tensor, by the backend ``image_tensor_backend`` names."""
    decode = _torchvision_decoder()
    if decode is None:
        return decode_image_tensor_with_pil(data)
    import torch

    # torchvision reads a 1-D uint8 tensor; bytearray makes it writable (torch warns on read-only buffers).
    encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    try:
        image: torch.Tensor = decode(encoded)
    except RuntimeError as exc:
        raise FormatError(
            f"decode='tensor': expected a JPEG or PNG torchvision can decode, found {len(data)} bytes it "
            f"refuses ({exc}); check the column holds images, or read it with decode='pil'"
        ) from exc
    return image


def decode_image_tensor_with_pil(data: Buffer) -> torch.Tensor:
    """The same as ``decode_image_tensor`` through Pillow and numpy: what is used without torchvision."""
    from stream_plugin.format.encodings import pil_image_module

    return _image_tensor(pil_image_module().open(io.BytesIO(data)))


def decode_pil_tensor(data: Buffer) -> torch.Tensor:
    """A stored ``pil`` value as a ``(C, H, W)`` uint8 tensor: 8-bit modes straight from the stored
    pixels, without a PIL image; other modes through one, expanded as ``decode_image_tensor_with_pil``."""
    import torch

    from stream_plugin.format.encodings import decode_pil, read_pil_header

    mode, width, height, offset = read_pil_header(data)
    channels = _KEPT_MODES.get(mode)
    if channels is None:
        return _image_tensor(decode_pil(data))
    expected = width * height * channels
    if len(data) - offset != expected:
        raise FormatError(
            f"decode='tensor': expected {expected} bytes of pixels after the header of a {width}x{height} "
            f"{mode} 'pil' value, found {len(data) - offset}; the value is damaged: rewrite the shard"
        )
    pixels = np.frombuffer(data, dtype=np.uint8, count=expected, offset=offset)  # (H * W * C,), the map's
    pixels_hwc = pixels.reshape(height, width, channels)  # (H, W, C), rows top to bottom
    return torch.from_numpy(pixels_hwc.transpose(2, 0, 1).copy())  # (C, H, W), writable, owns its memory


def _image_tensor(image: PILImage.Image) -> torch.Tensor:
    """A PIL image as a ``(C, H, W)`` uint8 tensor, palette, 1-bit and CMYK images expanded as torchvision does."""
    import torch

    if image.mode in _EXPANDED_MODES:
        expanded = _EXPANDED_MODES[image.mode]
        if image.mode == "P" and "transparency" in image.info:
            expanded = "RGBA"
        image = image.convert(expanded)
    channels = _KEPT_MODES.get(image.mode)
    if channels is None:
        raise FormatError(
            f"decode='tensor': expected an 8-bit image (Pillow mode in {sorted(_KEPT_MODES)} or one that "
            f"expands to them), found mode {image.mode!r}; read this column with decode='pil' and convert "
            "the image yourself"
        )
    pixels = np.asarray(image, dtype=np.uint8).reshape(image.height, image.width, channels)  # (H, W, C)
    return torch.from_numpy(pixels.transpose(2, 0, 1).copy())  # (C, H, W), writable and contiguous


# The encodings whose values "tensor" decodes, and the decoder of each of their images (the list
# encodings' items): files through the backend, MosaicML's raw pixels straight.
TENSOR_DECODERS: dict[str, Callable[[Buffer], torch.Tensor]] = {
    **dict.fromkeys(("jpeg", "png", "list[jpeg]", "list[png]", "jpeg_array", "jpegarray"), decode_image_tensor),
    **dict.fromkeys(("pil", "list[pil]"), decode_pil_tensor),
}
TENSOR_DECODABLE: tuple[str, ...] = tuple(TENSOR_DECODERS)


def image_tensor_backend() -> str:
    """``"torchvision"`` when ``decode="tensor"`` decodes with ``torchvision.io`` in this process, else ``"pil"``."""
    return "pil" if _torchvision_decoder() is None else "torchvision"


@functools.cache
def _torchvision_decoder() -> Any:
    """``torchvision.io.decode_image`` in unchanged mode, or None where torchvision is not importable."""
    try:
        import torch  # noqa: F401  (torch first: a missing torch is a missing dependency, not a fallback)
    except ImportError as exc:
        raise MissingDependencyError(
            f"decode='tensor' needs torch, found it is not importable ({exc}); install torch, or read "
            "images with decode='pil'"
        ) from exc
    try:
        from torchvision.io import ImageReadMode, decode_image
    except ImportError:
        return None
    except Exception as exc:  # noqa: BLE001 - a torchvision built for another torch fails in many ways
        warnings.warn(
            f"decode='tensor': torchvision is installed but does not import ({type(exc).__name__}: {exc}); "
            "decoding with Pillow instead. Install the torchvision built for this torch to decode with it",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return functools.partial(decode_image, mode=ImageReadMode.UNCHANGED)
