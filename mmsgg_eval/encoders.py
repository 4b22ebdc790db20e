"""Image/text encoders for :class:`~mmsgg_eval.metrics.RelCLIPScore` and the relation alignment study.

Every encoder implements one small interface (the *encoder protocol*; any object with these members can be
passed to the metric, e.g. a test stub):

* ``encode_image(images: Tensor[N, 3, H, W]) -> Tensor[N, D]``: images are RGB floats in [0, 1] (other sample
  types are converted by :func:`to_rgb_float`). The encoder applies ITS model's preprocessing on tensors
  (resize, centre crop, mean/std normalisation, see :class:`ImagePreprocess`) and returns raw (not normalised)
  float32 features.
* ``encode_text(texts: list[str]) -> Tensor[N, D]``: raw float32 features.
* optional ``preprocess: ImagePreprocess``: the geometry of the model input; the metric uses it to crop union
  boxes directly at the model's input size (one ``roi_align`` call). Default: 224x224 centre crop.
* optional ``similarity_to_score(cos: Tensor) -> Tensor``: the per-relation score s from the cosine of
  L2-normalised embeddings. Default ``max(cos, 0)`` (CLIPScore); SigLIP uses its sigmoid probability
  ``sigmoid(cos * exp(logit_scale) + logit_bias)``.
* optional ``pair_scores(image_features: Tensor[N, ...], texts: list[str]) -> Tensor[N]``: for JOINT
  image-text scorers (BLIP-2 image-text matching), the score s of each (image, text) pair, where
  ``image_features`` are rows of ``encode_image``'s output (then not normalised by the caller). When present it
  replaces the cosine; ``encode_text`` is still used for the text-text similarity of the Ref variant.

:class:`RelationScorer` wraps any encoder with the batching, the text-embedding cache and the scoring rule
shared by the metric and the alignment study.

Backends, all loaded from LOCAL files only (nothing is ever downloaded):

* :class:`OpenCLIPEncoder`: open_clip (``pip install mmsgg_eval[clip]``): a built-in architecture name plus a
  local checkpoint file, or ``model_name='local-dir:/path'`` (``open_clip_config.json`` + weights). CLIP
  ViT-B/32 = ``model_name='ViT-B-32-quickgelu', pretrained='/ckpt/ViT-B-32.pt'``; NegCLIP =
  ``model_name='ViT-B-32-quickgelu', pretrained='/ckpt/negclip.pth'``.
* :class:`HFCLIPEncoder` / :class:`HFSigLIPEncoder`: transformers (``pip install mmsgg_eval[hf]``),
  ``from_pretrained(local_dir, local_files_only=True)`` of the model, tokenizer and image processor.
* :class:`BLIP2ITMEncoder`: a transformers ``Blip2ForImageTextRetrieval`` from a local directory; s is the
  probability of the "match" class of its image-text-matching head, ``softmax(itm_logits)[:, 1]``.

Images: :func:`decode_image` reads a file as its 8-bit RGB version, whatever its mode or bit depth (16-bit,
palette, gray, CMYK, alpha, 1-bit, float); :func:`to_rgb_uint8` / :func:`to_rgb_float` are the one conversion of
decoded samples and of image tensors into what the encoders see (the rules are in :func:`to_rgb_uint8`).

Build from a config with :func:`build_encoder` (``dict(type='OpenCLIPEncoder', model_name=..., pretrained=...)``);
register custom encoders with ``@ENCODERS.register_module()``.
"""
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from mmengine.registry import Registry
from torch import Tensor, nn

__all__ = ['ENCODERS', 'build_encoder', 'ImagePreprocess', 'crop_regions', 'BaseCLIPEncoder', 'OpenCLIPEncoder',
           'HFCLIPEncoder', 'HFSigLIPEncoder', 'BLIP2ITMEncoder', 'RelationScorer', 'is_encoder', 'decode_image',
           'to_rgb_uint8', 'to_rgb_float']


def _build_from_cfg(cfg: Any, registry: Registry, default_args: Optional[dict] = None) -> Any:
    """Build ``cfg['type'](**rest)`` from this registry only (no MMEngine scope switching)."""
    args = dict(default_args or {})
    args.update(dict(cfg))
    obj_type = args.pop('type', None)
    if obj_type is None:
        raise KeyError(f'encoder config needs a `type` (one of {sorted(registry.module_dict)}), got {dict(cfg)}')
    obj_cls = registry.get(obj_type) if isinstance(obj_type, str) else obj_type
    if obj_cls is None:
        raise KeyError(f'unknown encoder type {obj_type!r}; registered: {sorted(registry.module_dict)}')
    return obj_cls(**args)


ENCODERS = Registry('clip encoder', build_func=_build_from_cfg, scope='mmsgg_eval')


def is_encoder(obj: Any) -> bool:
    """True when ``obj`` implements the encoder protocol (``encode_image`` and ``encode_text``)."""
    return callable(getattr(obj, 'encode_image', None)) and callable(getattr(obj, 'encode_text', None))


def build_encoder(cfg: Any) -> Any:
    """An encoder from a config dict (``type`` in :data:`ENCODERS`), or ``cfg`` itself if already built."""
    if is_encoder(cfg):
        return cfg
    if isinstance(cfg, dict):
        return ENCODERS.build(cfg)
    raise TypeError(f'encoder must be a config dict or an object with encode_image/encode_text, got {type(cfg)}')


def _require(module: str, extra: str, what: str):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f'{what} needs the optional dependency `{module}` ({err}); install it with '
                          f"`pip install 'mmsgg_eval[{extra}]'`") from None


# ---------------------------------------------------------------------------------------------- image samples
_WARNED_RANGE = [False]


def _warn_range_once(message: str) -> None:
    if not _WARNED_RANGE[0]:
        _WARNED_RANGE[0] = True
        from .metrics.base import warn_user
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


# ---------------------------------------------------------------------------------------------- preprocessing
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


def crop_regions(images: Sequence[Tensor], image_index: Tensor, boxes: Tensor,
                 preprocess: ImagePreprocess = DEFAULT_PREPROCESS) -> Tensor:
    """Crop xyxy ``boxes`` [R, 4] (pixels of ``images[image_index[r]]``) at the model's input size, in one call.

    ``images``: [C, H_i, W_i] tensors on one device (RGB uint8 or float in [0, 1]; any other type or channel
    count is converted by :func:`to_rgb_float`, e.g. uint16 as its 8-bit version); sizes may differ. Each
    box is clipped to its image, reduced to the region the model's resize + centre crop would keep
    (:meth:`ImagePreprocess.regions`) and resampled by ``torchvision.ops.roi_align`` (``aligned=True``: a box
    [x1, x2] covers pixels x1..x2-1 like ``PIL.Image.crop``; adaptive sampling averages about one sample per
    source pixel, i.e. an anti-aliased box-filter downscale; upscaling is bilinear where the model's own
    transform is bicubic). Against ``PIL.Image.crop`` + the model's own transform (open_clip / transformers,
    integer boxes) the crops differ by about 0.002 mean and 0.03 max absolute error in [0, 1] units at 224 px
    (tests/test_encoders.py asserts mean <= 0.01, max <= 0.06). Images are padded to a common size by edge
    replication, which reproduces roi_align's border clamping exactly. Returns [R, 3, *preprocess.output_size]
    float32 in [0, 1] (not normalised).
    """
    from torchvision.ops import roi_align
    out_h, out_w = preprocess.output_size
    if boxes.shape[0] == 0:
        device = images[0].device if len(images) else boxes.device
        return torch.zeros((0, 3, out_h, out_w), device=device)
    used = torch.unique(image_index).tolist()
    slot = {i: n for n, i in enumerate(used)}
    max_h = max(int(images[i].shape[-2]) for i in used)
    max_w = max(int(images[i].shape[-1]) for i in used)
    device = images[used[0]].device
    canvas = torch.empty((len(used), 3, max_h, max_w), dtype=torch.float32, device=device)
    sizes = torch.zeros((len(used), 2), dtype=torch.float32, device=device)
    for i in used:
        img = to_rgb_float(images[i].to(device), f'image {i}')
        h, w = img.shape[-2:]
        canvas[slot[i]] = F.pad(img[None], (0, max_w - w, 0, max_h - h), mode='replicate')[0] \
            if (h, w) != (max_h, max_w) else img
        sizes[slot[i]] = torch.tensor([w, h], dtype=torch.float32)
    index = torch.tensor([slot[int(i)] for i in image_index.tolist()], dtype=torch.long, device=device)
    wh = sizes[index].repeat(1, 2)
    clipped = torch.minimum(boxes.float().to(device).clamp(min=0), wh)
    # at least one pixel wide/high, kept inside the image
    size = (clipped[:, 2:] - clipped[:, :2]).clamp(min=1.0)
    lo = torch.minimum(clipped[:, :2], wh[:, :2] - size).clamp(min=0)
    clipped = torch.cat([lo, lo + size], dim=1)
    regions = preprocess.regions(clipped)
    rois = torch.cat([index[:, None].float(), regions], dim=1)
    crops = roi_align(canvas, rois, output_size=(out_h, out_w), spatial_scale=1.0, sampling_ratio=-1,
                      aligned=True)
    return crops.clamp_(0, 1)


# ---------------------------------------------------------------------------------------------- encoders
_DTYPES = {'fp32': torch.float32, 'fp16': torch.float16, 'bf16': torch.bfloat16}


class BaseCLIPEncoder(nn.Module):
    """Shared logic: preprocessing on tensors, dtype/device handling, cosine or sigmoid scores.

    Subclasses set ``self.preprocess`` and implement ``_image_features(pixels)`` / ``_text_features(texts)``.
    ``score='cosine'`` gives s = max(cos, 0); ``score='sigmoid'`` gives
    s = sigmoid(cos * exp(logit_scale) + logit_bias) from the model's own scale and bias.
    """
    preprocess: ImagePreprocess

    def __init__(self, score: str = 'cosine', precision: str = 'fp32') -> None:
        super().__init__()
        if score not in ('cosine', 'sigmoid'):
            raise ValueError(f"score must be 'cosine' or 'sigmoid', got {score!r}")
        if precision not in _DTYPES:
            raise ValueError(f'precision must be one of {sorted(_DTYPES)}, got {precision!r}')
        self.score = score
        self.precision = precision

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """Input dtype of the towers: that of the first convolution / linear layer (open_clip keeps some
        parameters in float32 under 'bf16' / 'fp16')."""
        return next(m.weight.dtype for m in self.modules() if isinstance(m, (nn.Conv2d, nn.Linear)))

    @torch.no_grad()
    def encode_image(self, images: Tensor) -> Tensor:
        """[N, 3, H, W] RGB in [0, 1] (other types: :func:`to_rgb_float`) -> [N, D] float32 features (model
        preprocessing applied here)."""
        pixels = self.preprocess(images.to(self.device))
        return self._image_features(pixels.to(self.dtype)).float()

    @torch.no_grad()
    def encode_text(self, texts: Sequence[str]) -> Tensor:
        """list of N strings -> [N, D] float32 features."""
        return self._text_features(list(texts)).float()

    def logit_scale_and_bias(self) -> Tuple[Tensor, Tensor]:  # pragma: no cover - overridden
        raise NotImplementedError(f'{type(self).__name__} has no sigmoid head (use score="cosine")')

    def similarity_to_score(self, cos: Tensor) -> Tensor:
        """Per-relation score s from the cosine of L2-normalised image and text embeddings."""
        if self.score == 'cosine':
            return cos.clamp(min=0)
        scale, bias = (t.detach().float().to(cos.device) for t in self.logit_scale_and_bias())
        return torch.sigmoid(cos * scale.exp() + bias)

    def _image_features(self, pixels: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _text_features(self, texts: List[str]) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


def _is_torchscript(path: str) -> bool:
    """True for a TorchScript archive (e.g. OpenAI's ``ViT-B-32.pt``), False for pickled state dicts."""
    import zipfile
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as zf:
        return any(name.endswith('constants.pkl') for name in zf.namelist())


def _load_torchscript_weights(model: nn.Module, path: str) -> None:
    """Strictly load the weights of a TorchScript CLIP archive (OpenAI key names = open_clip's)."""
    state = torch.jit.load(path, map_location='cpu').state_dict()
    skip = {'input_resolution', 'context_length', 'vocab_size'}  # OpenAI metadata stored as tensors
    skip |= {name for name, _ in model.named_buffers()} - set(model.state_dict())  # non-persistent buffers
    model.load_state_dict({k: v for k, v in state.items() if k not in skip}, strict=True)


@ENCODERS.register_module()
class OpenCLIPEncoder(BaseCLIPEncoder):
    """CLIP / NegCLIP / other open_clip models from local files.

    Args:
        model_name: an open_clip architecture (``'ViT-B-32-quickgelu'`` for OpenAI CLIP B/32 and NegCLIP,
            ``'ViT-L-14-quickgelu'``...) or ``'local-dir:/path'`` (``open_clip_config.json`` + weights).
            ``hf-hub:`` names are refused (no downloads); architectures whose tokenizer or text tower comes from
            the Hugging Face hub need a ``local-dir`` holding them.
        pretrained: path of a LOCAL checkpoint file: a state dict, a ``{'state_dict': ...}`` training checkpoint
            with or without ``module.`` prefix (NegCLIP's ``negclip.pth``), safetensors, or an OpenAI TorchScript
            archive (``ViT-B-32.pt``). open_clip tags (``'openai'``) are refused (they would download).
        score: 'auto' (sigmoid when the model has a ``logit_bias``, i.e. SigLIP-style, else cosine),
            'cosine' or 'sigmoid'.
        precision: 'fp32', 'fp16' or 'bf16' weights.
        device: where the model is created.
        random_init: allow ``pretrained=None`` (random weights; benchmarks and tests only).
    """

    def __init__(self, model_name: str = 'ViT-B-32-quickgelu', pretrained: Optional[str] = None,
                 score: str = 'auto', precision: str = 'fp32', device: Union[str, torch.device] = 'cpu',
                 random_init: bool = False) -> None:
        if score not in ('auto', 'cosine', 'sigmoid'):
            raise ValueError(f"score must be 'auto', 'cosine' or 'sigmoid', got {score!r}")
        open_clip = _require('open_clip', 'clip', 'OpenCLIPEncoder')
        if model_name.startswith('hf-hub:'):
            raise ValueError(f'OpenCLIPEncoder loads local files only; got {model_name!r}. Download the model '
                             f"once and use model_name='local-dir:/path' or a built-in name + pretrained=file")
        is_local_dir = model_name.startswith('local-dir:')
        if is_local_dir:
            if pretrained is not None:
                raise ValueError("pretrained must be None with model_name='local-dir:...' (weights come from "
                                 'the directory)')
        elif pretrained is None:
            if not random_init:
                raise ValueError(f'OpenCLIPEncoder({model_name!r}) needs pretrained=<local checkpoint file>; '
                                 f'pass random_init=True for random weights (benchmarks only)')
        elif not os.path.isfile(pretrained):
            raise FileNotFoundError(f'pretrained={pretrained!r} is not a local file (open_clip tags such as '
                                    f"'openai' would download; give the checkpoint path)")
        super().__init__(score='cosine', precision=precision)
        if pretrained is not None and _is_torchscript(pretrained):
            # OpenAI's released .pt files are TorchScript archives, which open_clip's weights_only load refuses
            import logging
            logging.disable(logging.WARNING)  # open_clip would warn that no weights were loaded
            try:
                model = open_clip.create_model(model_name, pretrained=None, precision=precision, device=device)
            finally:
                logging.disable(logging.NOTSET)
            _load_torchscript_weights(model, pretrained)
        else:
            model = open_clip.create_model(model_name, pretrained=pretrained, precision=precision, device=device)
        self.model = model.eval()
        self.model_name = model_name
        self.tokenizer = open_clip.get_tokenizer(model_name)
        cfg = dict(getattr(model.visual, 'preprocess_cfg', {}) or {})
        self.preprocess = self._preprocess_from_cfg(cfg, model)
        has_bias = getattr(model, 'logit_bias', None) is not None
        self.score = ('sigmoid' if has_bias else 'cosine') if score == 'auto' else score

    @staticmethod
    def _preprocess_from_cfg(cfg: Dict[str, Any], model: nn.Module) -> ImagePreprocess:
        size = _pair(cfg.get('size', getattr(model.visual, 'image_size', 224)))
        mode = cfg.get('resize_mode', 'shortest')
        interpolation = cfg.get('interpolation', 'bicubic')
        mean = tuple(cfg.get('mean', DEFAULT_PREPROCESS.mean))
        std = tuple(cfg.get('std', DEFAULT_PREPROCESS.std))
        if mode == 'shortest':
            if size[0] == size[1]:
                return ImagePreprocess('shortest', size[0], size, mean, std, interpolation)
            return ImagePreprocess('cover', size, size, mean, std, interpolation)
        if mode == 'squash':
            return ImagePreprocess('squash', size, None, mean, std, interpolation)
        raise NotImplementedError(f'open_clip resize_mode {mode!r} (letterbox padding) is not supported')

    def _image_features(self, pixels: Tensor) -> Tensor:
        return self.model.encode_image(pixels)

    def _text_features(self, texts: List[str]) -> Tensor:
        tokens = self.tokenizer(texts).to(self.device)
        model = self.model
        pool = getattr(model, 'text_pool_type', None)
        if getattr(model, 'attn_mask', None) is None or pool not in ('argmax', 'eos') or \
                not hasattr(model, 'token_embedding'):
            return model.encode_text(tokens)
        # Causal text tower pooled at the end-of-text token: the padding after it cannot change the result,
        # so run only the first L positions (open_clip pads every text to 77 tokens; triplets need ~10).
        if pool == 'argmax':
            last = tokens.argmax(dim=-1)
        else:
            last = (tokens == model.text_eos_id).int().argmax(dim=-1)
        length = int(last.max()) + 1
        tokens = tokens[:, :length]
        cast_dtype = model.transformer.get_cast_dtype()
        x = model.token_embedding(tokens).to(cast_dtype) + model.positional_embedding[:length].to(cast_dtype)
        x = model.transformer(x, attn_mask=model.attn_mask[:length, :length])
        x = model.ln_final(x)
        x = x[torch.arange(x.shape[0], device=x.device), last]
        projection = model.text_projection
        if projection is None:
            return x
        return projection(x) if isinstance(projection, nn.Linear) else x @ projection

    def logit_scale_and_bias(self) -> Tuple[Tensor, Tensor]:
        bias = getattr(self.model, 'logit_bias', None)
        if bias is None:
            raise ValueError(f'{self.model_name} has no logit_bias: use score="cosine"')
        return self.model.logit_scale.reshape(()), bias.reshape(())


def _size_field(size: Any, key: str) -> Optional[int]:
    if size is None:
        return None
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return None if value is None else int(value)


def _load_hf_dir(owner: str, model_path: str, model_class: str) -> Tuple[nn.Module, Any, ImagePreprocess]:
    """(model, tokenizer, preprocessing) of a LOCAL transformers directory (``from_pretrained(...,
    local_files_only=True)`` of ``transformers.<model_class>``, the tokenizer and the image processor)."""
    transformers = _require('transformers', 'hf', owner)
    if not os.path.isdir(model_path):
        raise FileNotFoundError(f'{owner}: model_path={model_path!r} is not a local directory '
                                f'(hub ids are not downloaded; save the model with save_pretrained first)')
    model = getattr(transformers, model_class).from_pretrained(model_path, local_files_only=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_path, local_files_only=True)
    processor = transformers.AutoImageProcessor.from_pretrained(model_path, local_files_only=True)
    return model, tokenizer, HFCLIPEncoder.preprocess_from_processor(processor)


@ENCODERS.register_module()
class HFCLIPEncoder(BaseCLIPEncoder):
    """A transformers CLIP-style dual encoder (``get_image_features`` / ``get_text_features``) from a local dir.

    The directory must hold the model (``config.json`` + weights), its tokenizer and its image processor
    (``preprocessor_config.json``), as written by ``save_pretrained``. Loading uses
    ``from_pretrained(model_path, local_files_only=True)``.

    Args:
        model_path: local directory.
        score: 'cosine' (default) or 'sigmoid'.
        precision: 'fp32', 'fp16' or 'bf16'.
        device: where the model is placed.
        max_length: text truncation length; default the text model's ``max_position_embeddings``.
    """
    text_padding: Union[bool, str] = True
    default_score = 'cosine'

    def __init__(self, model_path: str, score: Optional[str] = None, precision: str = 'fp32',
                 device: Union[str, torch.device] = 'cpu', max_length: Optional[int] = None) -> None:
        super().__init__(score=score or self.default_score, precision=precision)
        model, self.tokenizer, self.preprocess = _load_hf_dir(type(self).__name__, model_path, 'AutoModel')
        for name in ('get_image_features', 'get_text_features'):
            if not hasattr(model, name):
                raise TypeError(f'{type(model).__name__} from {model_path} has no {name}(); '
                                f'{type(self).__name__} needs a CLIP-style dual encoder')
        self.model = model.to(device=device, dtype=_DTYPES[precision]).eval()
        self.model_path = model_path
        text_cfg = getattr(model.config, 'text_config', model.config)
        self.max_length = int(max_length or getattr(text_cfg, 'max_position_embeddings', 77))

    @staticmethod
    def preprocess_from_processor(processor: Any) -> ImagePreprocess:
        """:class:`ImagePreprocess` equivalent of a transformers image processor (CLIP, SigLIP, ...)."""
        size = getattr(processor, 'size', None)
        crop = getattr(processor, 'crop_size', None) if getattr(processor, 'do_center_crop', False) else None
        crop_hw = None if crop is None else (_size_field(crop, 'height'), _size_field(crop, 'width'))
        if not getattr(processor, 'do_resize', True):
            raise NotImplementedError('image processors without do_resize are not supported')
        resample = getattr(processor, 'resample', 3)
        interpolation = {0: 'nearest', 2: 'bilinear', 3: 'bicubic'}.get(int(resample), 'bicubic')
        rescale = float(getattr(processor, 'rescale_factor', 1 / 255)) if getattr(processor, 'do_rescale', True) \
            else 1.0
        if abs(rescale * 255 - 1) > 1e-6:
            raise NotImplementedError(f'rescale_factor {rescale} (expected 1/255) is not supported')
        if getattr(processor, 'do_normalize', True):
            mean = tuple(float(v) for v in processor.image_mean)
            std = tuple(float(v) for v in processor.image_std)
        else:
            mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
        shortest = _size_field(size, 'shortest_edge')
        if shortest is not None:
            return ImagePreprocess('shortest', shortest, crop_hw or (shortest, shortest), mean, std, interpolation)
        height, width = _size_field(size, 'height'), _size_field(size, 'width')
        if height is None or width is None:
            raise NotImplementedError(f'image processor size {size} is not supported')
        return ImagePreprocess('squash', (height, width), crop_hw, mean, std, interpolation)

    @staticmethod
    def _pooled(out: Any) -> Tensor:
        """transformers >= 5 returns an output object whose ``pooler_output`` is the projected embedding."""
        return out if isinstance(out, Tensor) else out.pooler_output

    def _image_features(self, pixels: Tensor) -> Tensor:
        return self._pooled(self.model.get_image_features(pixel_values=pixels))

    def _text_features(self, texts: List[str]) -> Tensor:
        tokens = self.tokenizer(texts, padding=self.text_padding, truncation=True, max_length=self.max_length,
                                return_tensors='pt')
        tokens = {k: v.to(self.device) for k, v in tokens.items() if k in ('input_ids', 'attention_mask')}
        return self._pooled(self.model.get_text_features(**tokens))

    def logit_scale_and_bias(self) -> Tuple[Tensor, Tensor]:
        bias = getattr(self.model, 'logit_bias', None)
        if bias is None:
            raise ValueError(f'{type(self.model).__name__} has no logit_bias: use score="cosine"')
        return self.model.logit_scale.reshape(()), bias.reshape(())


@ENCODERS.register_module()
class HFSigLIPEncoder(HFCLIPEncoder):
    """SigLIP / SigLIP 2 from a local transformers directory; s = sigmoid(cos * exp(logit_scale) + logit_bias).

    Text is padded to ``max_length`` (64 for the released models), as SigLIP was trained (its text tower pools
    the last position). ``score='cosine'`` gives max(cos, 0) instead.
    """
    text_padding = 'max_length'
    default_score = 'sigmoid'


@ENCODERS.register_module()
class BLIP2ITMEncoder(BaseCLIPEncoder):
    """BLIP-2 image-text matching (transformers ``Blip2ForImageTextRetrieval``) from a local directory.

    The score of a (region, text) pair is the probability of the "match" class of the ITM head,
    ``s = softmax(itm_logits)[:, 1]`` (class 1 = match, as the model was trained; one softmax). The image tower
    runs once per crop (:meth:`encode_image` returns the vision tower's patch features [N, T, C]); the Q-Former
    then attends to them once per text (:meth:`pair_scores`). :meth:`encode_text` is the Q-Former's projected
    text [CLS] embedding (the ITC text feature), used for the text-text similarity of the Ref variant.

    The directory must hold the model (``config.json`` with ``qformer_config.use_qformer_text_input=True`` +
    weights), its tokenizer and its image processor, as written by ``save_pretrained``.

    Args:
        model_path: local directory.
        precision: 'fp32', 'fp16' or 'bf16'.
        device: where the model is placed.
        max_length: text truncation length; default the Q-Former's ``max_position_embeddings``.
    """

    def __init__(self, model_path: str, precision: str = 'fp32', device: Union[str, torch.device] = 'cpu',
                 max_length: Optional[int] = None) -> None:
        super().__init__(score='cosine', precision=precision)
        model, self.tokenizer, self.preprocess = _load_hf_dir(type(self).__name__, model_path,
                                                              'Blip2ForImageTextRetrieval')
        if not getattr(model.config.qformer_config, 'use_qformer_text_input', False):
            raise ValueError(f'{model_path}: BLIP-2 image-text matching needs '
                             f'qformer_config.use_qformer_text_input=True')
        self.model = model.to(device=device, dtype=_DTYPES[precision]).eval()
        self.model_path = model_path
        self.max_length = int(max_length or model.config.qformer_config.max_position_embeddings)

    def _tokens(self, texts: List[str]) -> Dict[str, Tensor]:
        tokens = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                                return_tensors='pt')
        return {k: tokens[k].to(self.device) for k in ('input_ids', 'attention_mask')}

    def _image_features(self, pixels: Tensor) -> Tensor:
        return self.model.vision_model(pixel_values=pixels).last_hidden_state

    def _text_features(self, texts: List[str]) -> Tensor:
        tokens = self._tokens(texts)
        embeds = self.model.embeddings(input_ids=tokens['input_ids'])
        out = self.model.qformer(query_embeds=embeds, query_length=0, attention_mask=tokens['attention_mask'])
        return self.model.text_projection(out.last_hidden_state[:, 0, :].to(self.model.text_projection.weight.dtype))

    @torch.no_grad()
    def pair_scores(self, image_features: Tensor, texts: Sequence[str]) -> Tensor:
        """s = softmax(itm_logits)[:, 1] of each (image_features[i], texts[i]) pair -> [N] float32.

        The query tokens attend to the image patches and, with the text, form the Q-Former input exactly as
        ``Blip2ForImageTextRetrieval.forward(..., use_image_text_matching_head=True)`` (the query positions
        are always attended, whether or not a processor inserted image tokens into the text)."""
        qformer_dtype = self.model.query_tokens.dtype
        image_embeds = image_features.to(device=self.device, dtype=qformer_dtype)
        tokens = self._tokens(list(texts))
        query = self.model.query_tokens.expand(image_embeds.shape[0], -1, -1)
        query_mask = torch.ones(query.shape[:-1], dtype=torch.long, device=self.device)
        image_mask = torch.ones(image_embeds.shape[:-1], dtype=torch.long, device=self.device)
        embeds = self.model.embeddings(input_ids=tokens['input_ids'], query_embeds=query)
        out = self.model.qformer(query_embeds=embeds, query_length=query.shape[1],
                                 attention_mask=torch.cat([query_mask, tokens['attention_mask']], dim=1),
                                 encoder_hidden_states=image_embeds, encoder_attention_mask=image_mask)
        hidden = out.last_hidden_state[:, :query.shape[1], :].to(self.model.itm_head.weight.dtype)
        logits = self.model.itm_head(hidden).mean(dim=1)
        return torch.softmax(logits.float(), dim=-1)[:, 1]


class RelationScorer:
    """Score (image region, triplet text) pairs with any encoder of the protocol.

    * :meth:`crop`: union boxes cropped at the model's input size (:func:`crop_regions`, one call);
    * :meth:`image_features`: the image tower on crops, ``batch_size`` at a time (L2-normalised for dual
      encoders, raw for joint scorers);
    * :meth:`embed_texts`: L2-normalised text embeddings, each distinct string encoded once per scorer and device;
    * :meth:`scores`: s of pairs (row of the image features, text): ``similarity_to_score(cos)`` (default
      ``max(cos, 0)``) for dual encoders, ``pair_scores`` for joint scorers, ``batch_size`` pairs at a time;
    * :meth:`text_similarity`: max(cos, 0) between text embeddings (the Ref variant's b).
    """

    def __init__(self, encoder: Any, batch_size: int = 64) -> None:
        self.encoder = build_encoder(encoder)
        self.batch_size = int(batch_size)
        if self.batch_size < 1:
            raise ValueError(f'batch_size must be positive, got {batch_size}')
        self.text_cache: Dict[str, Tensor] = {}
        self._device: Optional[torch.device] = None

    @property
    def joint(self) -> bool:
        """True for encoders scoring an (image, text) pair jointly (``pair_scores``)."""
        return callable(getattr(self.encoder, 'pair_scores', None))

    @property
    def preprocess(self) -> ImagePreprocess:
        return getattr(self.encoder, 'preprocess', None) or DEFAULT_PREPROCESS

    def place(self, device: torch.device) -> None:
        """Move the encoder to ``device`` (once; the text cache is per device)."""
        if self._device != device:
            if callable(getattr(self.encoder, 'to', None)):
                self.encoder.to(device)
            self.text_cache.clear()
            self._device = device

    def crop(self, images: Sequence[Tensor], image_index: Tensor, boxes: Tensor) -> Tensor:
        return crop_regions(images, image_index, boxes, self.preprocess)

    def embed_texts(self, texts: Sequence[str], device: torch.device) -> Tensor:
        """L2-normalised text embeddings [N, D] (float32) on ``device``."""
        missing = list(dict.fromkeys(t for t in texts if t not in self.text_cache))
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start:start + self.batch_size]
            emb = F.normalize(torch.as_tensor(self.encoder.encode_text(chunk)).float(), dim=-1).to(device)
            self.text_cache.update(zip(chunk, emb))
        if not texts:
            return torch.zeros((0, 0), device=device)
        return torch.stack([self.text_cache[t] for t in texts]).to(device)

    def image_features(self, crops: Tensor) -> Tensor:
        """Image features [R, ...] of crops [R, 3, H, W] at the model input size."""
        parts = []
        for i in range(0, crops.shape[0], self.batch_size):
            feats = torch.as_tensor(self.encoder.encode_image(crops[i:i + self.batch_size])).float()
            parts.append((feats if self.joint else F.normalize(feats, dim=-1)).to(crops.device))
        return torch.cat(parts)

    def similarity_to_score(self, cos: Tensor) -> Tensor:
        fn = getattr(self.encoder, 'similarity_to_score', None)
        return fn(cos) if callable(fn) else cos.clamp(min=0)

    def scores(self, image_features: Tensor, rows: Tensor, texts: Sequence[str],
               text_emb: Optional[Tensor] = None) -> Tensor:
        """s [n] (float32) of the pairs (``image_features[rows[i]]``, ``texts[i]``); ``text_emb`` may pass the
        embeddings of ``texts`` when already computed (dual encoders)."""
        device = image_features.device
        if not len(texts):
            return torch.zeros(0, device=device)
        if self.joint:
            parts = [torch.as_tensor(self.encoder.pair_scores(image_features[rows[i:i + self.batch_size]],
                                                              list(texts[i:i + self.batch_size]))).float()
                     .to(device) for i in range(0, len(texts), self.batch_size)]
            return torch.cat(parts)
        if text_emb is None:
            text_emb = self.embed_texts(texts, device)
        return self.similarity_to_score((image_features[rows] * text_emb).sum(-1))

    @staticmethod
    def text_similarity(a: Tensor, b: Tensor) -> Tensor:
        """max(cos, 0) of rows of two L2-normalised embedding matrices of equal shape."""
        return (a * b).sum(-1).clamp(min=0)
