"""``RelCLIPScore`` (and ``RelBLIPScore`` / ``RelSIGLIPScore``): reference-free relation metrics with an
image-text model (``docs/metrics.md``; README, "Other metrics").

One concern: this one metric (its candidates, texts, crops, rows and declared keys); the
tensor rules are in :mod:`mmsgg_eval.functional.clip_score` and the encoders in :mod:`mmsgg_eval.encoders`.

Per image (boxes xyxy in ORIGINAL image pixels):

1. Candidates: the first ``topk`` relations of the graph-constrained ranked list (the list ``SGRecall`` uses:
   predicate = argmax of the non-background columns, score = predicate prob x subject score x object score,
   stable descending; single-label ``pred_relations.labels`` + 1-D ``scores`` are accepted).
2. Each predicted box is matched to the GT box of highest continuous IoU when that IoU >= ``iou_thr``. A
   relation counts when both boxes match, to two DIFFERENT GT objects; of several relations mapped to the same
   ordered GT pair only the best-ranked one counts. k = number of counted relations.
3. Each counted relation: text = ``template`` filled with the relation's subject, predicate and object words
   (see *Texts* below); image = the union of the two predicted boxes cropped from the original image file (read
   as its 8-bit RGB version whatever its mode or bit depth, :func:`~mmsgg_eval.encoders.decode_image`). The
   score s = max(cos, 0) of the L2-normalised embeddings (SigLIP: its sigmoid probability; BLIP-2: the ITM
   "match" probability; see :mod:`mmsgg_eval.encoders`).
4. m = number of GT objects, p = m(m-1)/2. Image score = mean(s) / D, D = max(log(max(p - k, 1)) + alpha, 1)
   (``penalty=True``; the paper's log(p - k) + alpha is undefined for p - k <= 0 and explodes at p - k = 1,
   hence the guard) or mean(s) (``penalty=False``). k = 0 gives 0 (the image counts); m < 2 skips the image.

Keys (percent, mean over the evaluated images): ``RelCLIPScore`` (penalised), ``CLIPScore`` (mean(s), no
penalty) and ``RefRelCLIPScore``: per counted relation whose GT pair carries at least one GT relation, the
harmonic mean 2ab/(a+b) of a = s and b = max(cos(text_pred, text_gt), 0), text_gt = the text of an annotated
GT triplet of that pair (dataset class and predicate names; the one most similar to the prediction when the
pair has several); per image the mean over those relations (0 when there is none, the image still counts, as
for ``CLIPScore``). ``RelBLIPScore`` / ``RelSIGLIPScore`` are the same metric with their own key names.

Texts (``text_source``):

* closed vocabulary: subject / object class names and predicate name from ``dataset_meta`` (``classes``,
  ``predicates``) of the predicted labels (today's SGG models);
* the model's own words (open vocabulary), per sample, when it carries them:

  - **contract for open-vocabulary models**: ``pred_relations.texts``, a list of R ``(subject, predicate,
    object)`` string triplets aligned with ``pred_relations.pair_idxs``. Boxes come from
    ``pred_instances.bboxes`` as usual; ``pred_relations.scores`` may be 1-D [R] (ranking scores, no
    ``labels`` needed) or the usual [R, P(+1)] matrix; ``pred_instances.labels`` may be omitted and
    ``pred_instances.scores`` defaults to 1. ``pred_relations.labels`` (0-based, -1 = not a dataset predicate)
    is only used for ``Precision``; without it a predicate word counts as the dataset predicate of the same
    normalised name;
  - raw VLM answers (``pred_text`` / ``pred_graph`` / ``vlm_result`` as for ``VLMSceneGraphMetric``, parsed
    with the ``vlm`` options): :func:`mmsgg_eval.io.vlm.to_data_sample` keeps every object and relation in the
    model's words under ``open_vocab`` (the same contract), objects whose class is not a dataset class
    included.

  Words are used as written except that ``_`` becomes a space and whitespace is collapsed.
  ``text_source='auto'`` (default) uses the words when a sample has them, ``'open'`` requires them,
  ``'closed'`` ignores them (a VLM's unknown names then never match).

Region breakdowns (``region_breakdown=True``, the paper's box-ratio / distance tables) add, in percent,
``Precision`` (share of counted relations with a GT relation on their GT pair whose predicate is one of that
pair's GT predicates) and, for the groups ``low_ratio`` / ``high_ratio`` (size ratio r < / >= ``ratio_thr``,
default 1:5) and ``near`` / ``far`` (distance d < / >= ``distance_thr``, default 0.2), the keys
``CLIPScore@group`` (mean s), ``RefRelCLIPScore@group`` and ``Precision@group``, each a mean over the counted
relations of the group (pooled over images, no penalty). r = min(A_s, A_o) / max(A_s, A_o) with A the areas
of the two matched GT boxes (1 when both are empty); d = Euclidean distance between the centres of the two
matched GT boxes divided by the image diagonal sqrt(W^2 + H^2) (W, H of the image file).

Modes: ``'sgdet'`` (default) uses the predicted boxes and labels. ``'sgcls'`` / ``'predcls'`` substitute the GT
boxes (and in PredCls the GT labels) exactly as ``SGRecall`` does; predicted object i then IS GT object i
(no IoU matching, so duplicate GT boxes stay distinct objects).

Distributed: each ``process()`` stores one row per image (m, k and the sums of s and of the Ref scores) and one
row per counted relation (table ``relations``: s, Ref score, precision hit, size ratio, distance);
``evaluate()`` (:class:`~mmsgg_eval.metrics.base.RowMetric`) reduces once and de-duplicates sampler padding by
``sample_idx``.
"""
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..encoders import RelationScorer, decode_image  # decode_image: the 8-bit RGB version of any image file
from ..functional import union_boxes
from ..functional.clip_score import (CLIP_SCORE_MODES, REGION_GROUPS, counted_relations, harmonic_mean,
                                     image_scores, penalty_divisor, reference_candidates, region_groups,
                                     region_quantities)
from ..registry import METRICS
from ..structures import SceneGraphBatch, collate_scene_graphs, get_field, sample_name, to_tensor
from ..io.vlm import VLMAnswerParser, normalize_name, to_data_sample
from ..user_messages import warn_user
from .base import RowMetric, Schema, Tables
from .options import iou_threshold, positive_int
from ..keys import RowKey
from .bootstrap import Contributions
from .row_keys import Columns, row_key_contributions, row_key_values

RELCLIP_MODES = CLIP_SCORE_MODES
TEXT_SOURCES = ('auto', 'open', 'closed')
Triplet = Tuple[str, str, str]
__all__ = ['RelCLIPScore', 'RelBLIPScore', 'RelSIGLIPScore', 'RELCLIP_MODES', 'TEXT_SOURCES', 'REGION_GROUPS',
           'clean_words', 'penalty_divisor', 'harmonic_mean', 'region_quantities', 'decode_image']


def clean_words(text: Any) -> str:
    """A model's words as put into the text template: ``_`` -> space, whitespace collapsed (case kept)."""
    return ' '.join(str(text).replace('_', ' ').split())


@METRICS.register_module()
class RelCLIPScore(RowMetric):
    """RelCLIPScore / CLIPScore / RefRelCLIPScore of predicted relations, in percent (see module docstring).

    Args:
        encoder: a built encoder (anything with ``encode_image`` / ``encode_text``) or a config dict for
            :func:`mmsgg_eval.encoders.build_encoder`, e.g.
            ``dict(type='OpenCLIPEncoder', model_name='ViT-B-32-quickgelu', pretrained='/ckpt/negclip.pth')``.
            ``RelBLIPScore`` / ``RelSIGLIPScore`` also take the path of a local model directory.
        topk: number of ranked relations considered per image.
        template: text template with ``{subject}``, ``{predicate}`` and ``{object}``.
        penalty: divide by D = max(log(max(p - k, 1)) + alpha, 1) (default) or not.
        iou_thr: box matching threshold (continuous IoU, ``>=``).
        alpha: the paper's alpha (1e-5).
        batch_size: crops per image-tower call (and pairs per joint-scorer call).
        device: where crops are made and the encoder runs; None = the device of the data samples.
        mode: 'sgdet' (default), 'sgcls' or 'predcls' (see module docstring).
        rank: 'score' (stable sort by triplet score, as SGRecall) or 'given' (input order).
        text_source: 'auto' (the model's words when a sample carries them, else dataset names), 'open' (words
            required) or 'closed' (dataset names only).
        vlm: options of the VLM answer parser (:class:`~mmsgg_eval.io.vlm.VLMAnswerParser`: ``canvas``,
            ``box_tolerance``, ``box_format``, ``synonyms``, as ``VLMSceneGraphMetric``) for raw ``pred_text`` /
            ``pred_graph`` samples; other names raise TypeError here.
        region_breakdown: add ``Precision`` and the size-ratio / distance group keys.
        ratio_thr / distance_thr: group thresholds (default 1:5 and 0.2 of the image diagonal).
        backend_args: MMEngine file backend arguments for reading ``img_path``.
        collect_device: unused (rows are reduced by :class:`RowAccumulator`); kept for MMEngine.
        prefix: key prefix (default 'relclip').
        outfile_prefix: when set, ``{outfile_prefix}.{prefix}.json`` receives the keys and counts (main rank).
        report_dir: when set, ``{prefix}.metrics.json`` (the summary) is written there (main rank).
    """
    default_prefix: Optional[str] = 'relclip'
    #: the "CLIP" of the key names (RelCLIPScore, CLIPScore, RefRelCLIPScore)
    score_name = 'CLIP'
    #: encoder type built when ``encoder`` is a directory path (None: a path is refused)
    default_encoder_type: Optional[str] = None

    def __init__(self, encoder: Any, topk: int = 20, template: str = '{subject} {predicate} {object}',
                 penalty: bool = True, iou_thr: float = 0.5, alpha: float = 1e-5, batch_size: int = 64,
                 device: Optional[str] = None, mode: str = 'sgdet', rank: str = 'score',
                 text_source: str = 'auto', vlm: Optional[dict] = None, region_breakdown: bool = False,
                 ratio_thr: float = 0.2, distance_thr: float = 0.2,
                 backend_args: Optional[dict] = None, collect_device: str = 'cpu',
                 prefix: Optional[str] = None, outfile_prefix: Optional[str] = None,
                 report_dir: Optional[str] = None) -> None:
        super().__init__(outfile_prefix=outfile_prefix, report_dir=report_dir, collect_device=collect_device,
                         prefix=prefix)
        if mode not in RELCLIP_MODES:
            raise ValueError(f'{type(self).__name__} mode must be one of {RELCLIP_MODES}, got {mode!r}')
        if rank not in ('score', 'given'):
            raise ValueError(f"rank must be 'score' or 'given', got {rank!r}")
        if text_source not in TEXT_SOURCES:
            raise ValueError(f'text_source must be one of {TEXT_SOURCES}, got {text_source!r}')
        owner = type(self).__name__
        topk, batch_size = positive_int(topk, 'topk', owner), positive_int(batch_size, 'batch_size', owner)
        iou_thr = iou_threshold(iou_thr, 'iou_thr', owner)
        try:
            template.format(subject='s', predicate='p', object='o')
        except (KeyError, IndexError) as err:
            raise ValueError(f'template {template!r} may only use {{subject}}, {{predicate}}, {{object}}: '
                             f'{err}') from None
        if isinstance(encoder, str):
            if self.default_encoder_type is None:
                raise TypeError(f'{type(self).__name__}: encoder must be a config dict or an encoder, got the '
                                f'string {encoder!r}')
            encoder = dict(type=self.default_encoder_type, model_path=encoder)
        self.scorer = RelationScorer(encoder, batch_size)
        self.encoder = self.scorer.encoder
        self.topk = int(topk)
        self.template = template
        self.penalty = bool(penalty)
        self.iou_thr = float(iou_thr)
        self.alpha = float(alpha)
        self.batch_size = int(batch_size)
        self._device = None if device is None else torch.device(device)
        self.mode = mode
        self.rank = rank
        self.text_source = text_source
        self.vlm_options = dict(vlm or {})
        #: the VLM answer reader of raw ``pred_text`` / ``pred_graph`` samples (options fail here)
        self.vlm_parser = VLMAnswerParser(**self.vlm_options, owner=type(self).__name__)
        self.region_breakdown = bool(region_breakdown)
        self.ratio_thr = float(ratio_thr)
        self.distance_thr = float(distance_thr)
        self.backend_args = backend_args
        self._warned_shape = False

    def row_schema(self) -> Schema:
        """One row per image (``images``) and one per counted relation (``relations``)."""
        return {'images': {'num_objects': (torch.int32, ()), 'num_counted': (torch.int32, ()),
                           'sum_score': (torch.float64, ()), 'num_ref': (torch.int32, ()),
                           'sum_ref': (torch.float64, ())},
                'relations': {'score': (torch.float64, ()), 'has_ref': (torch.bool, ()), 'ref': (torch.float64, ()),
                              'hit': (torch.bool, ()), 'ratio': (torch.float32, ()),
                              'distance': (torch.float32, ())}}

    # ------------------------------------------------------------------ dataset facts and texts
    def _names(self, key: str) -> List[str]:
        names = (self.dataset_meta or {}).get(key)
        if names is None:
            raise ValueError(f'{type(self).__name__}: dataset_meta has no `{key}`; use a dataset wrapper of '
                             f'mmsgg_eval or set metric.dataset_meta = dict(classes=..., predicates=...)')
        return [str(n) for n in names]

    def text(self, subject: str, predicate: str, obj: str) -> str:
        """The triplet text fed to the text tower."""
        return self.template.format(subject=subject, predicate=predicate, object=obj)

    def _prepare(self, sample: Any, predicate_index: Dict[str, int]) -> Tuple[Any, Optional[List[Triplet]],
                                                                               Optional[List[int]]]:
        """``(sample to collate, triplet words or None, predicate label of each word triplet or None)``.

        Raw VLM answers are parsed first; samples with words get a copy whose predictions the collate step
        accepts (object labels 0, single-label predicates only for ranking): words and boxes are what count.
        """
        if self.vlm_parser.holds_answer(sample):
            result = self.vlm_parser.result_of(sample, self._names('classes'), self._names('predicates'))
            sample = to_data_sample(result, sample, sample_idx=get_field(sample, 'sample_idx'))
        if self.text_source == 'closed':
            return sample, None, None
        words = get_field(sample, 'open_vocab')
        if words is not None:
            return self._open_sample(sample, get_field(words, 'pred_instances'), get_field(words, 'pred_relations'),
                                     predicate_index, 'open_vocab.pred_relations')
        relations = get_field(sample, 'pred_relations')
        if get_field(relations, 'texts') is not None:
            return self._open_sample(sample, get_field(sample, 'pred_instances'), relations, predicate_index,
                                     'pred_relations')
        if self.text_source == 'open':
            raise ValueError(f"{sample_name(sample)}: text_source='open' needs the model's words in "
                             f'`pred_relations.texts` (one (subject, predicate, object) triplet per pair) or a raw '
                             f'VLM answer (`pred_text`)')
        return sample, None, None

    def _open_sample(self, sample: Any, instances: Any, relations: Any, predicate_index: Dict[str, int],
                     where: str) -> Tuple[dict, List[Triplet], List[int]]:
        if relations is None or get_field(relations, 'pair_idxs') is None:
            raise ValueError(f'{sample_name(sample)}: missing field `{where}.pair_idxs`')
        pairs = to_tensor(get_field(relations, 'pair_idxs'), sample, f'{where}.pair_idxs').long().reshape(-1, 2)
        device, num_rel = pairs.device, pairs.shape[0]
        raw = get_field(relations, 'texts')
        raw = [] if raw is None else list(raw)
        if len(raw) != num_rel:
            raise ValueError(f'{sample_name(sample)}: `{where}.texts` has {len(raw)} entries for {num_rel} pairs '
                             f'(expected one (subject, predicate, object) triplet per pair)')
        triplets: List[Triplet] = []
        for j, entry in enumerate(raw):
            if isinstance(entry, str) or len(entry) != 3 or not all(isinstance(w, str) for w in entry):
                raise ValueError(f'{sample_name(sample)}: `{where}.texts[{j}]` = {entry!r} is not a (subject, '
                                 f'predicate, object) triplet of strings')
            triplets.append((entry[0], entry[1], entry[2]))
        scores = get_field(relations, 'scores')
        scores = torch.ones(num_rel, device=device) if scores is None else \
            to_tensor(scores, sample, f'{where}.scores', device).float()
        labels = get_field(relations, 'labels')
        if labels is not None:
            word_labels = to_tensor(labels, sample, f'{where}.labels').long().reshape(-1).tolist()
            if len(word_labels) != num_rel:
                raise ValueError(f'{sample_name(sample)}: `{where}.labels` has {len(word_labels)} entries for '
                                 f'{num_rel} pairs')
        else:
            word_labels = [predicate_index.get(normalize_name(t[1]), -1) for t in triplets]
        rel: Dict[str, Tensor] = {'pair_idxs': pairs, 'scores': scores}
        if scores.dim() == 1 or (scores.dim() == 2 and scores.shape[1] == 1):  # ranking scores only
            rel['scores'] = scores.reshape(-1)
            rel['labels'] = torch.zeros(num_rel, dtype=torch.long, device=device)
        out = {key: get_field(sample, key) for key in ('sample_idx', 'img_id', 'img_path', 'ori_shape',
                                                       'gt_instances', 'gt_relations')}
        out = {k: v for k, v in out.items() if v is not None}
        if instances is not None and get_field(instances, 'bboxes') is not None:
            boxes = to_tensor(get_field(instances, 'bboxes'), sample, 'pred_instances.bboxes', device).float()
            boxes = boxes.reshape(-1, 4)
            obj_scores = get_field(instances, 'scores')
            out['pred_instances'] = {
                'bboxes': boxes, 'labels': torch.zeros(boxes.shape[0], dtype=torch.long, device=device),
                'scores': torch.ones(boxes.shape[0], device=device) if obj_scores is None else
                to_tensor(obj_scores, sample, 'pred_instances.scores', device).float()}
        out['pred_relations'] = rel
        return out, triplets, word_labels

    def _relation_texts(self, batch: SceneGraphBatch, image_of: Tensor, rel: Tensor, sub: Tensor, obj: Tensor,
                        predicate: Tensor, words: List[Optional[List[Triplet]]],
                        word_labels: List[Optional[List[int]]], classes: List[str],
                        predicates: List[str]) -> Tuple[List[str], Tensor]:
        """Text and predicate label (closed vocabulary, -1 = none) of every counted relation."""
        sub_label = batch.pred_labels[image_of, sub].tolist()
        obj_label = batch.pred_labels[image_of, obj].tolist()
        texts, labels = [], []
        for b, r, s, o, p in zip(image_of.tolist(), rel.tolist(), sub_label, obj_label, predicate.tolist()):
            if words[b] is None:
                texts.append(self.text(classes[s], predicates[p], classes[o]))
                labels.append(p)
            else:
                ws, wp, wo = words[b][r]
                texts.append(self.text(clean_words(ws), clean_words(wp), clean_words(wo)))
                labels.append(word_labels[b][r])
        return texts, torch.tensor(labels, dtype=torch.long, device=image_of.device)

    # ------------------------------------------------------------------ selection (pure tensors)
    def select(self, batch: SceneGraphBatch) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Counted relations of a padded batch (:func:`~mmsgg_eval.functional.clip_score.counted_relations`).

        Returns ``(counted [B, K] bool, order [B, K] rel index, predicate [B, K] 0-based, gt_sub [B, K],
        gt_obj [B, K])``: position j of image b is the j-th relation of its graph-constrained ranked list.
        """
        return counted_relations(batch, self.topk, self.mode, self.iou_thr, self.rank)

    # ------------------------------------------------------------------ a pool becomes rows
    def compute_rows(self, data_samples: List[Any]) -> Dict[str, Dict[str, Tensor]]:
        """Score the counted relations of one pool; one row per image and one per counted relation."""
        classes, predicates = self._names('classes'), self._names('predicates')
        predicate_index = {normalize_name(p): i for i, p in reversed(list(enumerate(predicates)))}
        prepared = [self._prepare(s, predicate_index) for s in data_samples]
        samples = [p[0] for p in prepared]
        batch = collate_scene_graphs(samples, self.mode, len(classes), len(predicates), device=self._device)
        device = batch.device
        self.accumulator.number_missing(batch.sample_idx, type(self).__name__)
        num_objects = (batch.gt_labels >= 0).sum(1)
        counted, order, predicate, gt_sub, gt_obj = self.select(batch)
        counted &= (num_objects >= 2)[:, None]
        num_images = counted.shape[0]
        image_of, position = counted.nonzero(as_tuple=True)
        num_rel = int(image_of.numel())
        sums = torch.zeros(num_images, dtype=torch.float64, device=device)
        ref_sums = torch.zeros_like(sums)
        ref_counts = torch.zeros(num_images, dtype=torch.long, device=device)
        relations = {'sample_idx': batch.sample_idx[image_of], 'score': torch.zeros(num_rel, device=device),
                     'has_ref': torch.zeros(num_rel, dtype=torch.bool, device=device),
                     'ref': torch.zeros(num_rel, device=device),
                     'hit': torch.zeros(num_rel, dtype=torch.bool, device=device),
                     'ratio': torch.zeros(num_rel, device=device), 'distance': torch.zeros(num_rel, device=device)}
        if num_rel:
            self.scorer.place(device)
            rel = order[image_of, position]
            sub = batch.rel_pairs[image_of, rel, 0]
            obj = batch.rel_pairs[image_of, rel, 1]
            texts, labels = self._relation_texts(batch, image_of, rel, sub, obj, predicate[image_of, position],
                                                 [p[1] for p in prepared], [p[2] for p in prepared], classes,
                                                 predicates)
            text_emb = self.scorer.embed_texts(texts, device)
            boxes = union_boxes(batch.pred_boxes[image_of, sub], batch.pred_boxes[image_of, obj])
            images, scale, image_wh = self._load_images(samples, image_of)
            crops = self.scorer.crop(images, image_of, boxes * scale[image_of])
            del images
            features = self.scorer.image_features(crops)
            s = self.scorer.scores(features, torch.arange(num_rel, device=device), texts, text_emb).double()
            sums.index_add_(0, image_of, s)
            g_sub, g_obj = gt_sub[image_of, position], gt_obj[image_of, position]
            ref_ok, b, hit = self._reference_similarity(batch, image_of, g_sub, g_obj, text_emb, labels, classes,
                                                        predicates)
            ref = harmonic_mean(s, b.double())
            ref_sums.index_add_(0, image_of[ref_ok], ref[ref_ok])
            ref_counts += torch.bincount(image_of[ref_ok], minlength=num_images)
            ratio, distance = region_quantities(batch.gt_boxes[image_of, g_sub] * scale[image_of],
                                                batch.gt_boxes[image_of, g_obj] * scale[image_of],
                                                image_wh[image_of])
            relations.update(score=s, has_ref=ref_ok, ref=torch.where(ref_ok, ref, torch.zeros_like(ref)),
                             hit=hit & ref_ok, ratio=ratio, distance=distance)
        return {
            'images': {'sample_idx': batch.sample_idx, 'num_objects': num_objects, 'num_counted': counted.sum(1),
                       'sum_score': sums, 'num_ref': ref_counts, 'sum_ref': ref_sums},
            'relations': relations}

    def _load_images(self, samples: Sequence[Any], image_of: Tensor) -> Tuple[List[Tensor], Tensor, Tensor]:
        """Decode each needed image once (uint8 on the batch device). Returns the images, the per-sample box
        scale [B, 4] from the sample frame (``ori_shape``) to the file (1 when they agree) and the file sizes
        (W, H) [B, 2]."""
        device = image_of.device
        images: List[Optional[Tensor]] = [None] * len(samples)
        scale = torch.ones((len(samples), 4), device=device)
        image_wh = torch.ones((len(samples), 2), device=device)
        for i in torch.unique(image_of).tolist():
            sample = samples[i]
            path = get_field(sample, 'img_path')
            if path is None:
                raise ValueError(f'{sample_name(sample)}: missing metainfo `img_path` ({type(self).__name__} crops '
                                 f'the original image file)')
            img = decode_image(str(path), self.backend_args)
            height, width = img.shape[-2:]
            image_wh[i] = torch.tensor([float(width), float(height)])
            ori = get_field(sample, 'ori_shape')
            if ori is not None and (int(ori[0]), int(ori[1])) != (height, width):
                if not self._warned_shape:
                    warnings.warn(f'{sample_name(sample)}: {path} decodes to {(height, width)} but ori_shape is '
                                  f'{tuple(ori[:2])}; boxes are rescaled from ori_shape to the file')
                    self._warned_shape = True
                scale[i] = torch.tensor([width / float(ori[1]), height / float(ori[0])] * 2, dtype=torch.float32)
            images[i] = img.to(device)
        return images, scale, image_wh

    def _reference_similarity(self, batch: SceneGraphBatch, image_of: Tensor, gt_sub: Tensor, gt_obj: Tensor,
                              text_emb: Tensor, labels: Tensor, classes: List[str],
                              predicates: List[str]) -> Tuple[Tensor, Tensor, Tensor]:
        """For each counted relation: whether its GT pair has GT relations, b = max(cos, 0) with the most
        similar annotated GT triplet text of that pair, and whether ``labels`` is one of the pair's GT
        predicates."""
        candidate, has_ref, hit = reference_candidates(batch.gt_pairs[image_of], batch.gt_valid[image_of],
                                                       batch.gt_predicates[image_of], gt_sub, gt_obj, labels)
        b = torch.zeros(image_of.shape[0], device=text_emb.device)
        if not has_ref.any():
            return has_ref, b, hit
        rel_idx, gt_idx = candidate.nonzero(as_tuple=True)
        img = image_of[rel_idx]
        sub_cls = batch.gt_labels[img, batch.gt_pairs[img, gt_idx, 0]].tolist()
        obj_cls = batch.gt_labels[img, batch.gt_pairs[img, gt_idx, 1]].tolist()
        gt_pred = batch.gt_predicates[img, gt_idx].tolist()
        gt_texts = [self.text(classes[s], predicates[p], classes[o]) for s, p, o in zip(sub_cls, gt_pred, obj_cls)]
        cos = RelationScorer.text_similarity(self.scorer.embed_texts(gt_texts, text_emb.device), text_emb[rel_idx])
        best = torch.full_like(b, float('-inf')).scatter_reduce(0, rel_idx, cos, reduce='amax')
        b = torch.where(has_ref, best.clamp(min=0), b)
        return has_ref, b, hit

    # ------------------------------------------------------------------ reduced tables become keys
    def key_names(self) -> Tuple[str, str, str]:
        """(penalised, plain, Ref) key names, e.g. ('RelCLIPScore', 'CLIPScore', 'RefRelCLIPScore')."""
        n = self.score_name
        return f'Rel{n}Score', f'{n}Score', f'RefRel{n}Score'

    def row_keys(self) -> Tuple[RowKey, ...]:
        """Every key, declared once (:class:`~mmsgg_eval.keys.RowKey`: the summary and the bootstrap contributions
        both come from it), torch means in ``sample_idx`` order: the three scores, means over the images with >= 2
        GT objects (0 when there is none); with the region breakdown, ``Precision`` and the group keys, means
        over the counted relations (of the group; with a GT relation on their pair for Ref and Precision; NaN
        when there is none)."""
        rel_key, plain_key, ref_key = self.key_names()
        keys = [RowKey(name, 'images', name, where='evaluated', empty=0.0, summation='mean')
                for name in (rel_key, plain_key, ref_key)]
        if self.region_breakdown:
            keys.append(RowKey('Precision', 'relations', 'hit', where='has_ref', summation='mean'))
            for name in REGION_GROUPS:
                keys += [RowKey(f'{plain_key}@{name}', 'relations', 'score', where=name, summation='mean'),
                         RowKey(f'{ref_key}@{name}', 'relations', 'ref', where=f'{name}:ref', summation='mean'),
                         RowKey(f'Precision@{name}', 'relations', 'hit', where=f'{name}:ref', summation='mean')]
        return tuple(keys)

    def key_columns(self, tables: Tables) -> Columns:
        """The columns :meth:`row_keys` read: per image (in ``sample_idx`` order) ``evaluated`` (>= 2 GT objects)
        and its three scores (:func:`~mmsgg_eval.functional.clip_score.image_scores`); with the region breakdown,
        per counted relation its group memberships ``{group}`` and ``{group}:ref`` (with a GT relation on its
        pair)."""
        images = tables['images']
        order = torch.argsort(images['sample_idx'])
        images = {name: col[order] for name, col in images.items()}
        scores = image_scores(*(images[c] for c in ('num_objects', 'num_counted', 'sum_score', 'num_ref', 'sum_ref')),
                              alpha=self.alpha, penalty=self.penalty)
        columns = {'images': {**images, 'evaluated': images['num_objects'] >= 2, **dict(zip(self.key_names(), scores))}}
        if self.region_breakdown:
            relations = tables.get('relations')
            if relations is None:
                raise ValueError('region_breakdown needs the per-relation rows')
            has_ref = relations['has_ref'].bool()
            groups = region_groups(relations['ratio'], relations['distance'], self.ratio_thr, self.distance_thr)
            columns['relations'] = {**relations, **groups, **{f'{n}:ref': g & has_ref for n, g in groups.items()}}
        return columns

    def contributions(self, tables: Tables) -> Contributions:
        """Every key per image (the bootstrap intervals and ``compare``), from :meth:`row_keys`."""
        c = Contributions(tables['images']['sample_idx'])
        row_key_contributions(c, self.row_keys(), self.key_columns(tables))
        return c

    def summarize(self, tables: Tables) -> Dict[str, Any]:
        """Dataset keys (percent, :meth:`row_keys`) from de-duplicated per-image rows (in ``sample_idx`` order, so
        the result does not depend on the world size) and, for the region breakdown, per-relation rows."""
        columns = self.key_columns(tables)
        images = columns['images']
        evaluated = images['evaluated']
        k = images['num_counted'][evaluated].double()
        num_ref = images['num_ref'][evaluated].double()
        n = int(k.numel())
        metrics = row_key_values(self.row_keys(), columns)
        if n == 0:
            warn_user(f'{type(self).__name__}: no image with >= 2 GT objects was evaluated; all keys are 0')
        return {'metrics': metrics, 'num_images': n, 'num_samples': int(images['sample_idx'].numel()),
                'num_relations': int(k.sum()), 'num_ref_relations': int(num_ref.sum()),
                'mean_relations_per_image': float(k.mean()) if n else 0.0}

    def format_report(self, summary: Dict[str, Any], keys: Dict[str, float]) -> str:
        m = summary['metrics']
        rel_key, plain_key, ref_key = self.key_names()
        return (f"{type(self).__name__} ({self.mode}, top-{self.topk}, penalty={self.penalty}, "
                f"{type(self.encoder).__name__}): {summary['num_images']} images, "
                f"{summary['num_relations']} relations (mean k {summary['mean_relations_per_image']:.2f}), "
                f"{rel_key} {m[rel_key]:.2f}, {plain_key} {m[plain_key]:.2f}, "
                f"{ref_key} {m[ref_key]:.2f} ({summary['num_ref_relations']} relations)")


@METRICS.register_module()
class RelBLIPScore(RelCLIPScore):
    """RelCLIPScore with a BLIP-2 image-text-matching model: s = softmax(itm_logits)[:, 1] (the "match"
    probability). Keys ``RelBLIPScore`` / ``BLIPScore`` / ``RefRelBLIPScore`` (prefix 'relblip'); ``encoder``
    is a :class:`~mmsgg_eval.encoders.BLIP2ITMEncoder` config or the path of a local BLIP-2 directory."""
    default_prefix = 'relblip'
    score_name = 'BLIP'
    default_encoder_type = 'BLIP2ITMEncoder'


@METRICS.register_module()
class RelSIGLIPScore(RelCLIPScore):
    """RelCLIPScore with SigLIP: s = sigmoid(cos * exp(logit_scale) + logit_bias). Keys ``RelSIGLIPScore`` /
    ``SIGLIPScore`` / ``RefRelSIGLIPScore`` (prefix 'relsiglip'); ``encoder`` is an encoder config (e.g.
    ``HFSigLIPEncoder`` or an open_clip SigLIP) or the path of a local transformers SigLIP directory."""
    default_prefix = 'relsiglip'
    score_name = 'SIGLIP'
    default_encoder_type = 'HFSigLIPEncoder'
