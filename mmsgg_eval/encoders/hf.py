"""transformers backends: CLIP-style dual encoders and SigLIP from a LOCAL directory, and the loader of such a
directory (model, tokenizer, image processor as :class:`ImagePreprocess`) shared with BLIP-2."""
import os
from typing import Any, List, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from .base import DTYPES, BaseCLIPEncoder
from .preprocess import ImagePreprocess
from .registry import ENCODERS, _require

__all__ = ['HFCLIPEncoder', 'HFSigLIPEncoder', 'load_hf_dir']


def _size_field(size: Any, key: str) -> Optional[int]:
    if size is None:
        return None
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return None if value is None else int(value)


def load_hf_dir(owner: str, model_path: str, model_class: str) -> Tuple[nn.Module, Any, ImagePreprocess]:
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
        model, self.tokenizer, self.preprocess = load_hf_dir(type(self).__name__, model_path, 'AutoModel')
        for name in ('get_image_features', 'get_text_features'):
            if not hasattr(model, name):
                raise TypeError(f'{type(model).__name__} from {model_path} has no {name}(); '
                                f'{type(self).__name__} needs a CLIP-style dual encoder')
        self.model = model.to(device=device, dtype=DTYPES[precision]).eval()
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
