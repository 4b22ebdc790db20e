"""Scoring (image region, triplet text) pairs with any encoder of the protocol (:class:`RelationScorer`)."""
from typing import Any, Dict, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .crops import crop_regions
from .preprocess import DEFAULT_PREPROCESS, ImagePreprocess
from .registry import build_encoder

__all__ = ['RelationScorer']


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
