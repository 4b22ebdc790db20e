"""BLIP-2 image-text matching backend (a joint scorer: ``pair_scores``)."""
from typing import Dict, List, Optional, Sequence, Union

import torch
from torch import Tensor

from .base import DTYPES, BaseCLIPEncoder
from .hf import load_hf_dir
from .registry import ENCODERS

__all__ = ['BLIP2ITMEncoder']


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
        model, self.tokenizer, self.preprocess = load_hf_dir(type(self).__name__, model_path,
                                                              'Blip2ForImageTextRetrieval')
        if not getattr(model.config.qformer_config, 'use_qformer_text_input', False):
            raise ValueError(f'{model_path}: BLIP-2 image-text matching needs '
                             f'qformer_config.use_qformer_text_input=True')
        self.model = model.to(device=device, dtype=DTYPES[precision]).eval()
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
