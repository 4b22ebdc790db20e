"""The per-sample reader (:func:`read_scene_graph`): anything a metric may be given, read field by field, every
structural problem named with the sample and the field; and the objects a mode evaluates
(:func:`evaluated_objects`, the rule both readers share: see :mod:`.reader`)."""
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .batch import MODES, _STRENGTH, _check_produced_mode, _entries, _pairs, _valid_mask
from .fields import get_field, member, optional, sample_index, sample_name
from .validation import box_shape, check_tensor


# ---------------------------------------------------------------------------- the objects of a sample per mode
def model_boxes_required(mode: str) -> bool:
    """Whether ``mode`` needs the model's boxes (SGDet / PhrDet); SGCls reads them when given (else its labels are
    on the GT boxes), PredCls reads none of the model's objects."""
    return _STRENGTH[mode] >= _STRENGTH['sgdet']


@dataclass
class ObjectList:
    """The objects of one image (boxes [N, 4] xyxy, labels [N], scores [N]) or of a padded batch (boxes
    [B, N, 4], labels / scores [B, N], ``lengths`` the N_b of each image; None: every image has N). ``boxes``
    None: the model gave no boxes."""
    boxes: Optional[Tensor]
    labels: Optional[Tensor] = None
    scores: Optional[Tensor] = None
    lengths: Optional[List[int]] = None

    def counts(self) -> List[int]:
        """The number of objects of each image (one entry for a single image)."""
        if self.boxes.dim() == 2:
            return [self.boxes.shape[0]]
        return list(self.lengths) if self.lengths is not None else [self.boxes.shape[1]] * self.boxes.shape[0]

    def unit_scores(self) -> Tensor:
        """Float32 scores 1 for every object (0 on padding)."""
        if self.boxes.dim() == 2:
            return torch.ones(self.boxes.shape[0], device=self.boxes.device)
        return _valid_mask(self.lengths, self.boxes.shape[0], self.boxes.shape[1], self.boxes.device).float()


def evaluated_objects(mode: str, gt: ObjectList, model: Optional[ObjectList],
                      listed: Sequence[int]) -> Tuple[ObjectList, List[int]]:
    """The objects ``mode`` evaluates (the legacy rule of the module docstring), for one sample or a padded batch
    (both readers call this), and per image the length of the model's object list that should equal the GT's
    (-1: nothing to compare; the caller counts the others in :class:`ObjectCounts`).

    * PredCls: the GT boxes and labels with scores 1; ``listed``: the number of boxes the model listed per image
      (0: none), ``model`` is not read;
    * SGCls: the model's labels and scores, on its boxes (compared with the GT's count), or on the GT boxes when
      ``model.boxes`` is None;
    * SGDet / PhrDet: the model's objects.
    """
    if mode == 'predcls':
        return ObjectList(gt.boxes, gt.labels, gt.unit_scores(), gt.lengths), [n if n else -1 for n in listed]
    if model.boxes is None:
        return ObjectList(gt.boxes, model.labels, model.scores, gt.lengths), [-1] * len(gt.counts())
    counts = model.counts()
    return model, counts if mode == 'sgcls' else [-1] * len(counts)


def score_columns(scores: Tensor, num_predicates: int, score_layout: str, sample: Any) -> Tuple[Tensor, int]:
    """One sample's [R, C] predicate scores read under ``score_layout`` (:data:`SCORE_LAYOUTS`): the matrix to
    rank ([R, P + 1] with column 0 = no relation, or [R, P]; a background-last matrix becomes the view of its
    first P columns, its last column is checked like every score) and whether it has a background column. A
    width the layout does not allow raises a ValueError naming the sample."""
    width, num_rel = scores.shape[1], scores.shape[0]
    allowed = {'auto': (num_predicates + 1, num_predicates), 'background_first': (num_predicates + 1,),
               'background_last': (num_predicates + 1,), 'no_background': (num_predicates,)}[score_layout]
    if width not in allowed:
        expected = ' or '.join(f'[{num_rel}, {w}]' for w in allowed)
        rule = '' if score_layout == 'auto' else f' under score_layout={score_layout!r}'
        raise ValueError(
            f'{sample_name(sample)}: `pred_relations.scores` has shape {list(scores.shape)}; expected {expected}'
            f'{rule} for {num_predicates} predicates ([R, {num_predicates + 1}]: column 0 = no relation unless '
            f"score_layout='background_last'; [R, {num_predicates}]: no background column), or [{num_rel}] "
            f'with `pred_relations.labels`')
    if score_layout == 'background_last':
        check_tensor('score', scores[:, num_predicates], sample, f'pred_relations.scores[:, {num_predicates}]')
        return scores[:, :num_predicates], 0
    return scores, int(width == num_predicates + 1)


def read_scene_graph(sample: Any, mode: str, num_classes: int, num_predicates: int,
                     with_masks: bool = False, device: Optional[torch.device] = None,
                     score_layout: str = 'auto') -> dict:
    """Read one sample into tensors (see :class:`SceneGraphBatch`), checking its structure.

    Presence, shapes and counts are checked here; index fields keep their dtype (the values of every field
    are checked on the padded batch by :func:`collate_scene_graphs`). ``model_objects`` is the length of
    the model's object list in PredCls / SGCls when the model gave one (-1 otherwise); ``score_width`` the
    number of score columns given (-1: single-label scores), read under ``score_layout``.
    """
    if mode not in MODES:
        raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
    pred_relations = get_field(sample, 'pred_relations')
    if pred_relations is None:
        raise ValueError(f'{sample_name(sample)}: missing field `pred_relations` (the model must output '
                         f'pred_relations.pair_idxs and pred_relations.scores)')
    _check_produced_mode(sample, get_field(sample, 'pred_mode'), mode)
    rel_scores = member(pred_relations, 'scores', sample, 'pred_relations.scores', device)
    device = rel_scores.device
    gt = _read_gt(sample, device)
    objects, model_objects = _read_objects(sample, mode, gt['gt_boxes'], gt['gt_labels'], device)
    rel_pairs = _pairs(member(pred_relations, 'pair_idxs', sample, 'pred_relations.pair_idxs', device), sample,
                       'pred_relations.pair_idxs')
    scores = _read_relation_scores(sample, rel_scores, rel_pairs.shape[0], num_predicates, score_layout, device)
    out = dict(sample_idx=sample_index(sample), pred_boxes=objects.boxes, pred_labels=objects.labels,
               pred_scores=objects.scores, **gt, rel_pairs=rel_pairs, model_objects=model_objects, **scores)
    if with_masks:
        out.update(_read_masks(sample, mode, objects.boxes.shape[0], gt['gt_boxes'].shape[0], device))
    return out


def _read_gt(sample: Any, device: torch.device) -> dict:
    """One sample's GT: ``gt_boxes`` [M, 4], ``gt_labels`` [M], ``gt_pairs`` [G, 2], ``gt_predicates`` [G]."""
    gt_instances, gt_relations = get_field(sample, 'gt_instances'), get_field(sample, 'gt_relations')
    gt_boxes = box_shape(member(gt_instances, 'bboxes', sample, 'gt_instances.bboxes', device), sample,
                         'gt_instances.bboxes')
    gt_labels = _entries(member(gt_instances, 'labels', sample, 'gt_instances.labels', device), gt_boxes.shape[0],
                         sample, 'gt_instances.labels')
    gt_pairs = _pairs(member(gt_relations, 'pair_idxs', sample, 'gt_relations.pair_idxs', device), sample,
                      'gt_relations.pair_idxs')
    gt_predicates = _entries(member(gt_relations, 'labels', sample, 'gt_relations.labels', device),
                             gt_pairs.shape[0], sample, 'gt_relations.labels')
    return dict(gt_boxes=gt_boxes, gt_labels=gt_labels, gt_pairs=gt_pairs, gt_predicates=gt_predicates)


def _read_objects(sample: Any, mode: str, gt_boxes: Tensor, gt_labels: Tensor,
                  device: torch.device) -> Tuple[ObjectList, int]:
    """The objects ``mode`` evaluates for one sample (:func:`evaluated_objects`) and the length of the model's
    object list to compare with the GT's (-1: none); the model's labels and scores must have one entry per box
    they are on."""
    gt = ObjectList(gt_boxes, gt_labels)
    if mode == 'predcls':
        given = optional(sample, 'pred_instances.bboxes', device)
        objects, compared = evaluated_objects(mode, gt, None, [given.shape[0] if given is not None else 0])
        return objects, compared[0]
    pred_instances = get_field(sample, 'pred_instances')
    if pred_instances is None:
        raise ValueError(f'{sample_name(sample)}: mode {mode!r} needs `pred_instances` '
                         f'(labels and scores{", boxes" if model_boxes_required(mode) else ""})')
    boxes = None
    if model_boxes_required(mode) or get_field(pred_instances, 'bboxes') is not None:
        boxes = box_shape(member(pred_instances, 'bboxes', sample, 'pred_instances.bboxes', device), sample,
                          'pred_instances.bboxes')
    model = ObjectList(boxes, member(pred_instances, 'labels', sample, 'pred_instances.labels', device),
                       member(pred_instances, 'scores', sample, 'pred_instances.scores', device))
    objects, compared = evaluated_objects(mode, gt, model, ())
    count = objects.boxes.shape[0]
    reason = '' if boxes is not None else ' (one per GT box: `pred_instances` has no `bboxes`)'
    objects.labels = _entries(objects.labels, count, sample, 'pred_instances.labels', reason)
    objects.scores = _entries(objects.scores, count, sample, 'pred_instances.scores', reason).float()
    return objects, compared[0]


def _read_relation_scores(sample: Any, rel_scores: Tensor, num_rel: int, num_predicates: int, score_layout: str,
                          device: torch.device) -> dict:
    """One sample's predicate scores (float32) read under ``score_layout``: ``rel_scores`` the matrix to rank
    (single-label scores densified with ``-inf``, :func:`_densified`), ``single_label``, ``given_scores`` (the
    1-D scores of a single-label sample, else None), ``background`` (1: column 0 is "no relation") and
    ``score_width`` (the columns given; -1: single-label)."""
    rel_scores = rel_scores.float()
    single_label = rel_scores.dim() == 1 or (rel_scores.dim() == 2 and rel_scores.shape[1] == 1
                                             and optional(sample, 'pred_relations.labels') is not None)
    given_scores = None
    score_width = -1 if single_label else (rel_scores.shape[1] if rel_scores.dim() == 2 else 0)
    background = 0
    if single_label:
        given_scores = rel_scores.reshape(-1)
        rel_scores = _densified(sample, rel_scores, num_rel, num_predicates, device)
    elif rel_scores.dim() != 2 or rel_scores.shape[0] != num_rel:
        raise ValueError(
            f'{sample_name(sample)}: `pred_relations.scores` has shape {list(rel_scores.shape)}; expected '
            f'[{num_rel}, {num_predicates + 1}] (column 0 = no relation) or [{num_rel}, {num_predicates}] '
            f'for {num_predicates} predicates, or [{num_rel}] with `pred_relations.labels`')
    else:
        rel_scores, background = score_columns(rel_scores, num_predicates, score_layout, sample)
    return dict(rel_scores=rel_scores, single_label=single_label, given_scores=given_scores, background=background,
                score_width=score_width)


def _densified(sample: Any, rel_scores: Tensor, num_rel: int, num_predicates: int, device: torch.device) -> Tensor:
    """[R, P] matrix of single-label scores (one score per pair, at its ``pred_relations.labels`` column; -inf
    elsewhere: not a candidate)."""
    labels = optional(sample, 'pred_relations.labels', device)
    if labels is None:
        raise ValueError(f'{sample_name(sample)}: `pred_relations.scores` is 1-D, which needs '
                         f'`pred_relations.labels` (0-based predicates)')
    if rel_scores.numel() != num_rel:
        raise ValueError(f'{sample_name(sample)}: `pred_relations.scores` has {rel_scores.numel()} '
                         f'entries for {num_rel} pairs')
    labels = _entries(labels, num_rel, sample, 'pred_relations.labels')
    check_tensor('index', labels, sample, 'pred_relations.labels', num_predicates, 'predicate')
    dense = torch.full((num_rel, num_predicates), float('-inf'), device=device)
    dense[torch.arange(num_rel, device=device), labels.long()] = rel_scores.reshape(-1)
    return dense


def _read_masks(sample: Any, mode: str, num_pred: int, num_gt: int, device: torch.device) -> dict:
    """``gt_masks`` and ``pred_masks`` (the model's in SGDet / PhrDet, else the GT's) of one sample."""
    gt_masks = _require_masks(sample, 'gt_instances.masks', device)
    if mode in ('sgdet', 'phrdet'):
        pred_masks = _require_masks(sample, 'pred_instances.masks', device)
        if pred_masks.shape[0] != num_pred:
            raise ValueError(f'{sample_name(sample)}: `pred_instances.masks` has {pred_masks.shape[0]} '
                             f'masks for {num_pred} boxes')
    else:
        pred_masks = gt_masks
    if gt_masks.shape[0] != num_gt:
        raise ValueError(f'{sample_name(sample)}: `gt_instances.masks` has {gt_masks.shape[0]} masks for '
                         f'{num_gt} boxes')
    return dict(gt_masks=gt_masks, pred_masks=pred_masks)


def _require_masks(sample: Any, path: str, device: Optional[torch.device]) -> Tensor:
    """Bool masks at ``path`` for mask matching; a missing field says to use box matching instead."""
    masks = optional(sample, path, device)
    if masks is None:
        raise ValueError(f'{sample_name(sample)}: missing field `{path}`: match=\'mask\' (the default of '
                         f'protocol=\'openpsg\') compares segmentation masks; for box-only data use '
                         f'match=\'box\' (e.g. SGRecall(protocol=\'openpsg\', match=\'box\'), offline: '
                         f'--metric-options match=box)')
    return masks.bool()
