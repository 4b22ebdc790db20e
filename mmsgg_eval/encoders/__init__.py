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

Modules: :mod:`.registry` (registry, build), :mod:`.images` (decoding, RGB conversion), :mod:`.preprocess`
(model-input geometry), :mod:`.crops` (union-box crops), :mod:`.base` (the built-in encoders' base),
:mod:`.openclip`, :mod:`.hf` (CLIP, SigLIP), :mod:`.blip2` (the backends) and :mod:`.scorer`
(:class:`RelationScorer`).
"""
from .base import BaseCLIPEncoder
from .blip2 import BLIP2ITMEncoder
from .crops import crop_regions
from .hf import HFCLIPEncoder, HFSigLIPEncoder
from .images import decode_image, to_rgb_float, to_rgb_uint8
from .openclip import OpenCLIPEncoder
from .preprocess import DEFAULT_PREPROCESS, ImagePreprocess
from .registry import ENCODERS, build_encoder, is_encoder
from .scorer import RelationScorer

__all__ = ['ENCODERS', 'build_encoder', 'ImagePreprocess', 'crop_regions', 'BaseCLIPEncoder', 'OpenCLIPEncoder',
           'HFCLIPEncoder', 'HFSigLIPEncoder', 'BLIP2ITMEncoder', 'RelationScorer', 'is_encoder', 'decode_image',
           'to_rgb_uint8', 'to_rgb_float', 'DEFAULT_PREPROCESS']
