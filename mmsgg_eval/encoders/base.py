"""The base of the built-in encoders: preprocessing on tensors, dtype / device handling, cosine or sigmoid score."""
from typing import List, Sequence, Tuple

import torch
from torch import Tensor, nn

from .preprocess import ImagePreprocess

__all__ = ['BaseCLIPEncoder', 'DTYPES']

DTYPES = {'fp32': torch.float32, 'fp16': torch.float16, 'bf16': torch.bfloat16}


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
        if precision not in DTYPES:
            raise ValueError(f'precision must be one of {sorted(DTYPES)}, got {precision!r}')
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
