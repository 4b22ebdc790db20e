"""The model-input geometry of a CLIP-family image tower (:class:`ImagePreprocess`: resize, centre crop,
normalisation) on tensors, and the part of a box that geometry keeps."""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .images import to_rgb_float

__all__ = ['ImagePreprocess', 'DEFAULT_PREPROCESS']


def _pair(size: Union[int, Sequence[int]]) -> Tuple[int, int]:
    if isinstance(size, (int, float)):
        return int(size), int(size)
    size = tuple(int(s) for s in size)
    return (size[0], size[0]) if len(size) == 1 else (size[0], size[1])


@dataclass(frozen=True)
class ImagePreprocess:
    """Preprocessing of a CLIP-family image tower, applied to RGB float tensors in [0, 1].

    Geometry (all sizes ``(height, width)`` in pixels):

    * ``resize_mode='shortest'``: scale the image by ``resize_size / min(h, w)`` (shortest edge to
      ``resize_size``), then centre-crop ``crop_size`` (OpenAI CLIP, open_clip default, HF CLIP).
    * ``resize_mode='cover'``: scale by ``max(crop_h / h, crop_w / w)``, then centre-crop ``crop_size``
      (open_clip ``shortest`` with a non-square input).
    * ``resize_mode='squash'``: resize to ``resize_size`` ignoring the aspect ratio (SigLIP), then centre-crop
      ``crop_size`` if given.

    Then ``(x - mean) / std``. ``output_size`` is what the tower receives.
    """
    resize_mode: str = 'shortest'
    resize_size: Union[int, Tuple[int, int]] = 224
    crop_size: Optional[Tuple[int, int]] = (224, 224)
    mean: Tuple[float, ...] = (0.48145466, 0.4578275, 0.40821073)
    std: Tuple[float, ...] = (0.26862954, 0.26130258, 0.27577711)
    interpolation: str = 'bicubic'

    def __post_init__(self) -> None:
        if self.resize_mode not in ('shortest', 'cover', 'squash'):
            raise ValueError(f"resize_mode must be 'shortest', 'cover' or 'squash', got {self.resize_mode!r}")
        if self.resize_mode != 'squash' and self.crop_size is None:
            raise ValueError(f'resize_mode={self.resize_mode!r} without a crop size gives inputs of varying size')
        if self.crop_size is not None:
            object.__setattr__(self, 'crop_size', _pair(self.crop_size))
        if self.resize_mode == 'squash':
            object.__setattr__(self, 'resize_size', _pair(self.resize_size))
        elif self.resize_mode == 'shortest':
            object.__setattr__(self, 'resize_size', int(_pair(self.resize_size)[0]))

    @property
    def output_size(self) -> Tuple[int, int]:
        """(height, width) of the tensors fed to the image tower."""
        return self.crop_size if self.crop_size is not None else self.resize_size

    def _resized_sizes(self, heights: Tensor, widths: Tensor) -> Tuple[Tensor, Tensor]:
        """Size (h, w) an image/box of the given size has after the resize step (torchvision's rounding)."""
        if self.resize_mode == 'shortest':
            short, long = torch.minimum(heights, widths), torch.maximum(heights, widths)
            new_long = torch.floor(self.resize_size * long / short)
            new_short = torch.full_like(new_long, float(self.resize_size))
            width_short = widths <= heights
            return torch.where(width_short, new_long, new_short), torch.where(width_short, new_short, new_long)
        if self.resize_mode == 'cover':
            s = torch.maximum(self.crop_size[0] / heights, self.crop_size[1] / widths)
            return (torch.round(heights * s).clamp(min=self.crop_size[0]),
                    torch.round(widths * s).clamp(min=self.crop_size[1]))
        return (torch.full_like(heights, float(self.resize_size[0])),
                torch.full_like(widths, float(self.resize_size[1])))

    def regions(self, boxes: Tensor) -> Tensor:
        """Part of each xyxy box [R, 4] (pixels) that resize + centre crop keep, as xyxy boxes [R, 4].

        Resampling this region to :attr:`output_size` equals cropping the box, resizing it and centre-cropping
        it as the model's transform does, including the integer rounding of the resized size and of the crop
        offset (torchvision conventions, which open_clip and transformers share).
        """
        boxes = boxes.double()
        widths = (boxes[:, 2] - boxes[:, 0]).clamp(min=1e-3)
        heights = (boxes[:, 3] - boxes[:, 1]).clamp(min=1e-3)
        if self.crop_size is None:
            return boxes.float()
        new_h, new_w = self._resized_sizes(heights, widths)
        crop_h, crop_w = self.crop_size
        top = torch.round((new_h - crop_h) / 2).clamp(min=0)
        left = torch.round((new_w - crop_w) / 2).clamp(min=0)
        sy, sx = new_h / heights, new_w / widths
        x1 = boxes[:, 0] + left / sx
        y1 = boxes[:, 1] + top / sy
        x2 = torch.minimum(x1 + crop_w / sx, boxes[:, 2])
        y2 = torch.minimum(y1 + crop_h / sy, boxes[:, 3])
        return torch.stack([x1, y1, x2, y2], dim=1).float()

    def resize_and_crop(self, images: Tensor) -> Tensor:
        """Model geometry on a batch [N, 3, H, W] of equal-size images (identity when already at size)."""
        import torchvision.transforms.v2.functional as TF
        from torchvision.transforms import InterpolationMode
        if tuple(images.shape[-2:]) == tuple(self.output_size):
            return images
        mode = {'bicubic': InterpolationMode.BICUBIC, 'bilinear': InterpolationMode.BILINEAR,
                'nearest': InterpolationMode.NEAREST}.get(self.interpolation, InterpolationMode.BICUBIC)
        h, w = images.shape[-2:]
        if self.resize_mode == 'shortest':
            size: List[int] = [self.resize_size]
        elif self.resize_mode == 'cover':
            s = max(self.crop_size[0] / h, self.crop_size[1] / w)
            size = [max(self.crop_size[0], round(h * s)), max(self.crop_size[1], round(w * s))]
        else:
            size = list(self.resize_size)
        out = TF.resize(images, size, interpolation=mode, antialias=True)
        if self.crop_size is not None:
            out = TF.center_crop(out, list(self.crop_size))
        return out.clamp(0, 1) if mode == InterpolationMode.BICUBIC else out

    def normalize(self, images: Tensor) -> Tensor:
        mean = torch.tensor(self.mean, dtype=images.dtype, device=images.device)[:, None, None]
        std = torch.tensor(self.std, dtype=images.dtype, device=images.device)[:, None, None]
        return (images - mean) / std

    def __call__(self, images: Tensor) -> Tensor:
        """[N, C, H, W] images (RGB floats in [0, 1], or any type :func:`to_rgb_float` converts) -> normalised
        [N, 3, *output_size] float32."""
        return self.normalize(self.resize_and_crop(to_rgb_float(images)))


DEFAULT_PREPROCESS = ImagePreprocess()
