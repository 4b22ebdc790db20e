"""Image samples: decoding a file as its 8-bit RGB version and the one conversion of any image tensor into what
the crops and encoders see (RGB uint8 / float in [0, 1])."""
from typing import Optional

import torch
from torch import Tensor

from ..user_messages import warn_user

__all__ = ['decode_image', 'to_rgb_uint8', 'to_rgb_float']

_WARNED_RANGE = [False]


def _warn_range_once(message: str) -> None:
    if not _WARNED_RANGE[0]:
        _WARNED_RANGE[0] = True
        warn_user(message)


def _rgb_channels(image: Tensor, name: str) -> Tensor:
    """[..., 3, H, W] from [..., C, H, W], C = 1 (gray, repeated), 2 (gray + alpha), 3 (RGB), 4 (RGBA / RGBX);
    alpha is dropped, not composited."""
    channels = int(image.shape[-3]) if image.ndim >= 3 else 0
    if channels not in (1, 2, 3, 4):
        raise ValueError(f'{name}: an image must be [..., C, H, W] with C = 1, 2, 3 or 4 channels (gray, gray + '
                         f'alpha, RGB, RGBA), got shape {list(image.shape)}')
    if channels <= 2:
        return image[..., :1, :, :].expand(*image.shape[:-3], 3, *image.shape[-2:])
    return image[..., :3, :, :]


def to_rgb_uint8(image: Tensor, name: str = 'image') -> Tensor:
    """The 8-bit RGB version, uint8 [..., 3, H, W], of image samples [..., C, H, W] of any type.

    This is the one conversion of every decoded image file (:func:`decode_image`) and, through
    :func:`to_rgb_float`, of every image tensor given to the crops and encoders:

    * channels: 1 = gray (repeated), 2 = gray + alpha, 3 = RGB, 4 = RGBA; alpha is dropped, not composited
      (as PIL's ``convert('RGB')`` and torchvision's ``ImageReadMode.RGB``);
    * bool: 0 / 255; uint8: as is;
    * other integers (uint16, int32, ...: 16-bit PNG / TIFF / PGM samples, PIL modes ``'I;16'`` and ``'I'``):
      the 16-bit scale, clipped to [0, 65535], 8-bit value ``v >> 8`` (the high byte: what PIL
      does with 16-bit RGB(A) PNGs and torchvision's ``to_dtype(..., scale=True)``);
    * floats (PIL mode ``'F'``): [0, 1], clipped, 8-bit value ``round(255 v)``.

    Samples outside their scale, and wide integers that hold only 0..255 (8-bit data saved in a 16- or 32-bit
    container, which reads as black), are reported once per process (``name`` names the image).
    """
    image = _rgb_channels(image, name)
    if image.dtype == torch.uint8:
        return image.contiguous()
    if image.dtype == torch.bool:
        return image.to(torch.uint8) * 255
    if image.is_floating_point():
        if image.numel() and bool(((image < 0) | (image > 1)).any()):
            _warn_range_once(f'{name}: float image samples outside [0, 1] (min {float(image.min()):g}, max '
                             f'{float(image.max()):g}) are clipped; float images are read on [0, 1] (PIL mode '
                             f"'F' on PIL's 0-255 scale comes out almost white: save it as 8-bit)")
        return torch.round(image.float().clamp(0, 1) * 255).to(torch.uint8)
    wide = image.to(torch.int64 if image.dtype == torch.int64 else torch.int32)
    if wide.numel():
        low, high = int(wide.min()), int(wide.max())
        if low < 0 or high > 65535:
            _warn_range_once(f'{name}: integer image samples outside the 16-bit scale [0, 65535] (min {low}, '
                             f'max {high}) are clipped')
        elif 0 < high <= 255:
            _warn_range_once(f'{name}: a {image.dtype} image whose samples are all <= 255 (max {high}) is read '
                             f'on the 16-bit scale [0, 65535] and comes out almost black; is it 8-bit data '
                             f'saved in a 16- or 32-bit container?')
    return (wide.clamp(0, 65535) >> 8).to(torch.uint8)


def to_rgb_float(images: Tensor, name: str = 'image') -> Tensor:
    """RGB float32 [..., 3, H, W] in [0, 1] of image samples [..., C, H, W]: floats clipped to [0, 1] (not
    quantised), every other type ``to_rgb_uint8(images) / 255`` (:func:`to_rgb_uint8` has the rules)."""
    if images.is_floating_point():
        return _rgb_channels(images, name).float().clamp(0, 1)
    return to_rgb_uint8(images, name).float() / 255


#: PIL modes whose samples go to :func:`to_rgb_uint8` as stored (others through PIL's ``convert('RGB')``).
_PIL_SAMPLE_MODES = ('1', 'L', 'LA', 'RGB', 'RGBA', 'RGBX', 'I', 'F')


def _decode_with_pil(data: bytes, path: str) -> Tensor:
    """Samples [C, H, W] (stored type) of an image PIL opens, EXIF orientation applied. Palette ('P', 'PA'),
    CMYK, YCbCr, LAB, HSV and premultiplied-alpha modes become RGB by PIL's own conversion."""
    import io

    import numpy as np
    from PIL import Image, ImageOps, UnidentifiedImageError
    try:
        with Image.open(io.BytesIO(data)) as img:
            img = ImageOps.exif_transpose(img)
            if img.mode in _PIL_SAMPLE_MODES or img.mode.startswith('I;16'):
                arr = np.asarray(img)
            else:
                arr = np.asarray(img.convert('RGB'))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        raise ValueError(f'{path}: not a readable image ({type(err).__name__}: {err})') from None
    arr = np.array(arr, dtype=arr.dtype.newbyteorder('='), order='C')  # writable, native order ('I;16B')
    samples = torch.from_numpy(arr)
    return samples[None] if samples.ndim == 2 else samples.permute(2, 0, 1)


def decode_image(path: str, backend_args: Optional[dict] = None) -> Tensor:
    """The 8-bit RGB version, uint8 [3, H, W], of an image file (any MMEngine file backend; EXIF orientation
    applied, as cv2).

    JPEG, PNG, WebP and GIF (first frame) are decoded by torchvision (``ImageReadMode.RGB``: palette and gray
    expanded, alpha dropped; 16-bit PNGs keep their 16 bits), every other format PIL opens (TIFF, BMP, PGM,
    ...) by PIL; either way the samples become 8-bit RGB by :func:`to_rgb_uint8` (16-bit: ``v >> 8``).
    """
    from mmengine import fileio
    data = fileio.get(path, backend_args=backend_args)
    try:
        from torchvision.io import ImageReadMode, decode_image as tv_decode
        samples = tv_decode(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB,
                            apply_exif_orientation=True)
        if samples.ndim == 4:  # animated GIF: the first frame, as PIL
            samples = samples[0]
    except (RuntimeError, ValueError):  # a format torchvision cannot decode: PIL
        samples = _decode_with_pil(data, path)
    return to_rgb_uint8(samples, str(path))
