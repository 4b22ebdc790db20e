"""``RelCLIPScore``: reference-free relation metric with a CLIP-family model (``docs/metrics.md``).

Per image (boxes xyxy in ORIGINAL image pixels):

1. Candidates: the first ``topk`` relations of the graph-constrained ranked list (the list ``SGRecall`` uses:
   predicate = argmax of the non-background columns, score = predicate prob x subject score x object score,
   stable descending; single-label ``pred_relations.labels`` + 1-D ``scores`` are accepted).
2. Each predicted box is matched to the GT box of highest continuous IoU when that IoU >= ``iou_thr``. A
   relation counts when both boxes match, to two DIFFERENT GT objects; of several relations mapped to the same
   ordered GT pair only the best-ranked one counts. k = number of counted relations.
3. Each counted relation: text = ``template`` filled with the PREDICTED subject class, predicate and object
   class names; image = the union of the two predicted boxes cropped from the original image file. The score
   is s = max(cos, 0) of the L2-normalised embeddings (SigLIP: its sigmoid probability; see
   :mod:`mmsgg_eval.encoders`).
4. m = number of GT objects, p = m(m-1)/2. Image score = mean(s) / D, D = max(log(max(p - k, 1)) + alpha, 1)
   (``penalty=True``; the paper's log(p - k) + alpha is undefined for p - k <= 0 and explodes at p - k = 1,
   hence the guard) or mean(s) (``penalty=False``). k = 0 gives 0 (the image counts); m < 2 skips the image.

Keys (percent, mean over the evaluated images): ``RelCLIPScore`` (penalised), ``CLIPScore`` (mean(s), no
penalty) and ``RefRelCLIPScore``: per counted relation whose GT pair carries at least one GT relation, the
harmonic mean 2ab/(a+b) of a = s and b = max(cos(text_pred, text_gt), 0), text_gt = the GT triplet text of
that pair most similar to the prediction; per image the mean over those relations (0 when there is none,
the image still counts, as for ``CLIPScore``).

Modes: ``'sgdet'`` (default) uses the predicted boxes and labels. ``'sgcls'`` / ``'predcls'`` substitute the GT
boxes (and in PredCls the GT labels) exactly as ``SGRecall`` does; predicted object i then IS GT object i
(no IoU matching, so duplicate GT boxes stay distinct objects).

Distributed: each ``process()`` stores one row per image (m, k and the sums of s and of the Ref scores);
``evaluate()`` (:class:`~mmsgg_eval.metrics.base.RowMetric`) reduces once and de-duplicates sampler padding by
``sample_idx``.
"""
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..encoders import DEFAULT_PREPROCESS, build_encoder, crop_regions
from ..functional import box_iou, stable_topk, triplet_scores, union_boxes
from ..registry import METRICS
from ..structures import SceneGraphBatch, collate_scene_graphs, get_field, sample_name
from .base import RowMetric, Schema, Tables, warn_user

RELCLIP_MODES = ('predcls', 'sgcls', 'sgdet')


def penalty_divisor(p: Tensor, k: Tensor, alpha: float = 1e-5) -> Tensor:
    """D = max(log(max(p - k, 1)) + alpha, 1) (natural log), elementwise, float64."""
    diff = (p.double() - k.double()).clamp(min=1)
    return (torch.log(diff) + alpha).clamp(min=1)


def harmonic_mean(a: Tensor, b: Tensor) -> Tensor:
    """2ab / (a + b), 0 where a + b = 0."""
    total = a + b
    return torch.where(total > 0, 2 * a * b / total.clamp(min=1e-12), torch.zeros_like(total))


def decode_image(path: str, backend_args: Optional[dict] = None) -> Tensor:
    """RGB uint8 [3, H, W] of an image file (any MMEngine file backend; EXIF orientation applied, as cv2)."""
    from mmengine import fileio
    data = fileio.get(path, backend_args=backend_args)
    try:
        from torchvision.io import ImageReadMode, decode_image as tv_decode
        return tv_decode(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB,
                         apply_exif_orientation=True)
    except (RuntimeError, ValueError):  # a format torchvision cannot decode: fall back to PIL
        import io

        import numpy as np
        from PIL import Image, ImageOps
        with Image.open(io.BytesIO(data)) as img:
            arr = np.asarray(ImageOps.exif_transpose(img).convert('RGB'))
        return torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous()


@METRICS.register_module()
class RelCLIPScore(RowMetric):
    """RelCLIPScore / CLIPScore / RefRelCLIPScore of predicted relations, in percent (see module docstring).

    Args:
        encoder: a built encoder (anything with ``encode_image`` / ``encode_text``) or a config dict for
            :func:`mmsgg_eval.encoders.build_encoder`, e.g.
            ``dict(type='OpenCLIPEncoder', model_name='ViT-B-32-quickgelu', pretrained='/ckpt/negclip.pth')``.
        topk: number of ranked relations considered per image.
        template: text template with ``{subject}``, ``{predicate}`` and ``{object}``.
        penalty: divide by D = max(log(max(p - k, 1)) + alpha, 1) (default) or not.
        iou_thr: box matching threshold (continuous IoU, ``>=``).
        alpha: the paper's alpha (1e-5).
        batch_size: crops per image-tower call.
        device: where crops are made and the encoder runs; None = the device of the data samples.
        mode: 'sgdet' (default), 'sgcls' or 'predcls' (see module docstring).
        rank: 'score' (stable sort by triplet score, as SGRecall) or 'given' (input order).
        backend_args: MMEngine file backend arguments for reading ``img_path``.
        collect_device: unused (rows are reduced by :class:`RowAccumulator`); kept for MMEngine.
        prefix: key prefix (default 'relclip').
        outfile_prefix: when set, ``{outfile_prefix}.{prefix}.json`` receives the keys and counts (main rank).
        report_dir: when set, ``{prefix}.metrics.json`` (the summary) is written there (main rank).
    """
    default_prefix: Optional[str] = 'relclip'

    def __init__(self, encoder: Any, topk: int = 20, template: str = '{subject} {predicate} {object}',
                 penalty: bool = True, iou_thr: float = 0.5, alpha: float = 1e-5, batch_size: int = 64,
                 device: Optional[str] = None, mode: str = 'sgdet', rank: str = 'score',
                 backend_args: Optional[dict] = None, collect_device: str = 'cpu',
                 prefix: Optional[str] = None, outfile_prefix: Optional[str] = None,
                 report_dir: Optional[str] = None) -> None:
        super().__init__(outfile_prefix=outfile_prefix, report_dir=report_dir, collect_device=collect_device,
                         prefix=prefix)
        if mode not in RELCLIP_MODES:
            raise ValueError(f'RelCLIPScore mode must be one of {RELCLIP_MODES}, got {mode!r}')
        if rank not in ('score', 'given'):
            raise ValueError(f"rank must be 'score' or 'given', got {rank!r}")
        if int(topk) < 1 or int(batch_size) < 1:
            raise ValueError(f'topk and batch_size must be positive, got {topk}, {batch_size}')
        try:
            template.format(subject='s', predicate='p', object='o')
        except (KeyError, IndexError) as err:
            raise ValueError(f'template {template!r} may only use {{subject}}, {{predicate}}, {{object}}: '
                             f'{err}') from None
        self.encoder = build_encoder(encoder)
        self.topk = int(topk)
        self.template = template
        self.penalty = bool(penalty)
        self.iou_thr = float(iou_thr)
        self.alpha = float(alpha)
        self.batch_size = int(batch_size)
        self._device = None if device is None else torch.device(device)
        self.mode = mode
        self.rank = rank
        self.backend_args = backend_args
        self._text_cache: Dict[str, Tensor] = {}
        self._encoder_device: Optional[torch.device] = None
        self._warned_shape = False

    def row_schema(self) -> Schema:
        return {'images': {'num_objects': (torch.int32, ()), 'num_counted': (torch.int32, ()),
                           'sum_score': (torch.float64, ()), 'num_ref': (torch.int32, ()),
                           'sum_ref': (torch.float64, ())}}

    # ------------------------------------------------------------------ dataset facts
    def _names(self, key: str) -> List[str]:
        names = (self.dataset_meta or {}).get(key)
        if names is None:
            raise ValueError(f'RelCLIPScore: dataset_meta has no `{key}`; use a dataset wrapper of mmsgg_eval or '
                             f'set metric.dataset_meta = dict(classes=..., predicates=...)')
        return [str(n) for n in names]

    def text(self, subject: str, predicate: str, obj: str) -> str:
        """The triplet text fed to the text tower."""
        return self.template.format(subject=subject, predicate=predicate, object=obj)

    # ------------------------------------------------------------------ embeddings
    def _place_encoder(self, device: torch.device) -> None:
        if self._encoder_device != device:
            if callable(getattr(self.encoder, 'to', None)):
                self.encoder.to(device)
            self._text_cache.clear()
            self._encoder_device = device

    def embed_texts(self, texts: Sequence[str], device: torch.device) -> Tensor:
        """L2-normalised text embeddings [N, D] (float32), each distinct string encoded once per metric."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._text_cache))
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start:start + self.batch_size]
            emb = F.normalize(torch.as_tensor(self.encoder.encode_text(chunk)).float(), dim=-1).to(device)
            self._text_cache.update(zip(chunk, emb))
        if not texts:
            return torch.zeros((0, 0), device=device)
        return torch.stack([self._text_cache[t] for t in texts]).to(device)

    def embed_crops(self, crops: Tensor) -> Tensor:
        """L2-normalised image embeddings [R, D] of crops at the model input size, ``batch_size`` at a time."""
        parts = [F.normalize(torch.as_tensor(self.encoder.encode_image(crops[i:i + self.batch_size])).float(),
                             dim=-1).to(crops.device) for i in range(0, crops.shape[0], self.batch_size)]
        return torch.cat(parts)

    def score(self, cos: Tensor) -> Tensor:
        """Per-relation s from cosines: the encoder's ``similarity_to_score`` or max(cos, 0)."""
        fn = getattr(self.encoder, 'similarity_to_score', None)
        return fn(cos) if callable(fn) else cos.clamp(min=0)

    # ------------------------------------------------------------------ selection (pure tensors)
    def select(self, batch: SceneGraphBatch) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Counted relations of a padded batch.

        Returns ``(counted [B, K] bool, order [B, K] rel index, predicate [B, K] 0-based, gt_sub [B, K],
        gt_obj [B, K])``: position j of image b is the j-th relation of its graph-constrained ranked list.
        """
        sub_score = batch.pred_scores.gather(1, batch.rel_pairs[..., 0])
        obj_score = batch.pred_scores.gather(1, batch.rel_pairs[..., 1])
        prob = batch.gc_prob
        if self.rank == 'given':
            length = min(self.topk, batch.rel_valid.shape[1])
            order = torch.arange(length, device=batch.device).expand(batch.rel_valid.shape[0], length)
            valid = batch.rel_valid[:, :length]
        else:
            order, valid = stable_topk(triplet_scores(prob, sub_score, obj_score), batch.rel_valid, self.topk)
        pairs = batch.rel_pairs.gather(1, order[..., None].expand(-1, -1, 2))
        num_pred, num_gt = batch.pred_boxes.shape[1], batch.gt_boxes.shape[1]
        if self.mode in ('predcls', 'sgcls'):  # predicted object i is GT object i
            gt_of = torch.arange(num_pred, device=batch.device).expand(batch.pred_boxes.shape[0], num_pred)
            matched = batch.pred_labels >= 0
        elif num_gt == 0:
            gt_of = torch.zeros(batch.pred_boxes.shape[:2], dtype=torch.long, device=batch.device)
            matched = torch.zeros_like(gt_of, dtype=torch.bool)
        else:
            iou = box_iou(batch.pred_boxes, batch.gt_boxes)
            iou = iou.masked_fill((batch.gt_labels < 0)[:, None, :], -1.0)
            best, gt_of = iou.max(dim=-1)  # ties: the first GT box
            matched = best >= self.iou_thr
        gt_sub = gt_of.gather(1, pairs[..., 0])
        gt_obj = gt_of.gather(1, pairs[..., 1])
        ok = valid & matched.gather(1, pairs[..., 0]) & matched.gather(1, pairs[..., 1]) & (gt_sub != gt_obj)
        key = gt_sub * max(num_gt, num_pred, 1) + gt_obj
        length = key.shape[1]
        earlier = torch.ones(length, length, dtype=torch.bool, device=batch.device).tril(-1)
        dup = ((key[:, :, None] == key[:, None, :]) & ok[:, None, :] & earlier).any(-1)
        counted = ok & ~dup
        return counted, order, batch.gc_predicate_at(order, valid), gt_sub, gt_obj

    # ------------------------------------------------------------------ a pool becomes rows
    def compute_rows(self, data_samples: List[Any]) -> Dict[str, Dict[str, Tensor]]:
        """Score the counted relations of one batch; one row per image."""
        classes, predicates = self._names('classes'), self._names('predicates')
        batch = collate_scene_graphs(data_samples, self.mode, len(classes), len(predicates), device=self._device)
        device = batch.device
        self.accumulator.number_missing(batch.sample_idx, 'RelCLIPScore')
        num_objects = (batch.gt_labels >= 0).sum(1)
        counted, order, predicate, gt_sub, gt_obj = self.select(batch)
        counted &= (num_objects >= 2)[:, None]
        num_images = counted.shape[0]
        image_of, position = counted.nonzero(as_tuple=True)
        num_rel = int(image_of.numel())
        sums = torch.zeros(num_images, dtype=torch.float64, device=device)
        ref_sums = torch.zeros_like(sums)
        ref_counts = torch.zeros(num_images, dtype=torch.long, device=device)
        if num_rel:
            self._place_encoder(device)
            rel = order[image_of, position]
            sub = batch.rel_pairs[image_of, rel, 0]
            obj = batch.rel_pairs[image_of, rel, 1]
            pred = predicate[image_of, position]
            sub_label = batch.pred_labels[image_of, sub].tolist()
            obj_label = batch.pred_labels[image_of, obj].tolist()
            texts = [self.text(classes[s], predicates[p], classes[o])
                     for s, p, o in zip(sub_label, pred.tolist(), obj_label)]
            text_emb = self.embed_texts(texts, device)
            boxes = union_boxes(batch.pred_boxes[image_of, sub], batch.pred_boxes[image_of, obj])
            images, boxes = self._load_images(data_samples, image_of, boxes)
            preprocess = getattr(self.encoder, 'preprocess', None) or DEFAULT_PREPROCESS
            crops = crop_regions(images, image_of, boxes, preprocess)
            del images
            image_emb = self.embed_crops(crops)
            s = self.score((image_emb * text_emb).sum(-1)).double()
            sums.index_add_(0, image_of, s)
            ref_ok, b = self._reference_similarity(batch, image_of, gt_sub[image_of, position],
                                                   gt_obj[image_of, position], text_emb, classes, predicates)
            ref_sums.index_add_(0, image_of[ref_ok], harmonic_mean(s[ref_ok], b[ref_ok].double()))
            ref_counts += torch.bincount(image_of[ref_ok], minlength=num_images)
        return {'images': {
            'sample_idx': batch.sample_idx, 'num_objects': num_objects, 'num_counted': counted.sum(1),
            'sum_score': sums, 'num_ref': ref_counts, 'sum_ref': ref_sums}}

    def _load_images(self, samples: Sequence[Any], image_of: Tensor, boxes: Tensor) -> Tuple[List[Tensor], Tensor]:
        """Decode each needed image once (uint8 on the batch device); rescale boxes if the file size differs
        from ``ori_shape``."""
        device = boxes.device
        images: List[Optional[Tensor]] = [None] * len(samples)
        scale = torch.ones((len(samples), 4), device=device)
        for i in torch.unique(image_of).tolist():
            sample = samples[i]
            path = get_field(sample, 'img_path')
            if path is None:
                raise ValueError(f'{sample_name(sample)}: missing metainfo `img_path` (RelCLIPScore crops the '
                                 f'original image file)')
            img = decode_image(str(path), self.backend_args)
            height, width = img.shape[-2:]
            ori = get_field(sample, 'ori_shape')
            if ori is not None and (int(ori[0]), int(ori[1])) != (height, width):
                if not self._warned_shape:
                    warnings.warn(f'{sample_name(sample)}: {path} decodes to {(height, width)} but ori_shape is '
                                  f'{tuple(ori[:2])}; boxes are rescaled from ori_shape to the file')
                    self._warned_shape = True
                scale[i] = torch.tensor([width / float(ori[1]), height / float(ori[0])] * 2, dtype=torch.float32)
            images[i] = img.to(device)
        return images, boxes * scale[image_of]

    def _reference_similarity(self, batch: SceneGraphBatch, image_of: Tensor, gt_sub: Tensor, gt_obj: Tensor,
                              text_emb: Tensor, classes: List[str], predicates: List[str]) -> Tuple[Tensor, Tensor]:
        """For each counted relation: whether its GT pair has GT relations, and b = max(cos, 0) with the most
        similar GT triplet text of that pair."""
        pairs = batch.gt_pairs[image_of]  # [R, G, 2]
        candidate = (pairs[..., 0] == gt_sub[:, None]) & (pairs[..., 1] == gt_obj[:, None]) \
            & batch.gt_valid[image_of]
        has_ref = candidate.any(1)
        b = torch.zeros(image_of.shape[0], device=text_emb.device)
        if not has_ref.any():
            return has_ref, b
        rel_idx, gt_idx = candidate.nonzero(as_tuple=True)
        img = image_of[rel_idx]
        sub_cls = batch.gt_labels[img, batch.gt_pairs[img, gt_idx, 0]].tolist()
        obj_cls = batch.gt_labels[img, batch.gt_pairs[img, gt_idx, 1]].tolist()
        gt_pred = batch.gt_predicates[img, gt_idx].tolist()
        gt_texts = [self.text(classes[s], predicates[p], classes[o]) for s, p, o in zip(sub_cls, gt_pred, obj_cls)]
        cos = (self.embed_texts(gt_texts, text_emb.device) * text_emb[rel_idx]).sum(-1)
        best = torch.full_like(b, float('-inf')).scatter_reduce(0, rel_idx, cos, reduce='amax')
        b = torch.where(has_ref, best.clamp(min=0), b)
        return has_ref, b

    # ------------------------------------------------------------------ reduced tables become keys
    def summarize(self, tables: Tables) -> Dict[str, Any]:
        """Dataset keys (percent) from de-duplicated per-image rows (summed in ``sample_idx`` order, so the
        result does not depend on the world size)."""
        images = tables['images']
        order = torch.argsort(images['sample_idx'])
        images = {name: col[order] for name, col in images.items()}
        evaluated = images['num_objects'] >= 2
        m = images['num_objects'][evaluated].double()
        k = images['num_counted'][evaluated].double()
        mean_s = torch.where(k > 0, images['sum_score'][evaluated] / k.clamp(min=1), torch.zeros_like(k))
        num_ref = images['num_ref'][evaluated].double()
        ref = torch.where(num_ref > 0, images['sum_ref'][evaluated] / num_ref.clamp(min=1), torch.zeros_like(k))
        rel = mean_s / penalty_divisor(m * (m - 1) / 2, k, self.alpha) if self.penalty else mean_s
        n = int(m.numel())

        def mean(values: Tensor) -> float:
            return 100.0 * float(values.mean()) if n else 0.0

        metrics = {'RelCLIPScore': mean(rel), 'CLIPScore': mean(mean_s), 'RefRelCLIPScore': mean(ref)}
        if n == 0:
            warn_user('RelCLIPScore: no image with >= 2 GT objects was evaluated; all keys are 0')
        return {'metrics': metrics, 'num_images': n, 'num_samples': int(images['sample_idx'].numel()),
                'num_relations': int(k.sum()), 'num_ref_relations': int(num_ref.sum()),
                'mean_relations_per_image': float(k.mean()) if n else 0.0}

    def format_report(self, summary: Dict[str, Any], keys: Dict[str, float]) -> str:
        m = summary['metrics']
        return (f"RelCLIPScore ({self.mode}, top-{self.topk}, penalty={self.penalty}, "
                f"{type(self.encoder).__name__}): {summary['num_images']} images, "
                f"{summary['num_relations']} relations (mean k {summary['mean_relations_per_image']:.2f}), "
                f"RelCLIPScore {m['RelCLIPScore']:.2f}, CLIPScore {m['CLIPScore']:.2f}, "
                f"RefRelCLIPScore {m['RefRelCLIPScore']:.2f} ({summary['num_ref_relations']} relations)")
