"""open_clip backend: CLIP / NegCLIP / SigLIP architectures with a LOCAL checkpoint (state dict, training
checkpoint, safetensors or an OpenAI TorchScript archive) or a local model directory."""
import os
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from .base import BaseCLIPEncoder
from .preprocess import DEFAULT_PREPROCESS, ImagePreprocess, _pair
from .registry import ENCODERS, _require

__all__ = ['OpenCLIPEncoder']


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
