"""Reading and validating data samples (SPEC section 1).

Metrics receive MMEngine data samples (``DetDataSample`` or their ``to_dict()`` form, or plain dicts of
numpy arrays in offline evaluation). This module turns them into typed tensors, checks them, and raises a
``ValueError`` naming the sample (``sample_idx`` / ``img_id``) and the offending field on bad input.
"""
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

MODES = ('predcls', 'sgcls', 'sgdet', 'phrdet')
# what each mode needs predicted: PredCls nothing, SGCls labels/scores, SGDet/PhrDet boxes too
_STRENGTH = {'predcls': 0, 'sgcls': 1, 'sgdet': 2, 'phrdet': 2}


def get_field(obj: Any, key: str, default: Any = None) -> Any:
    """``obj[key]`` for mappings, ``obj.key`` for data elements; ``default`` when absent."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def sample_name(sample: Any) -> str:
    """Human-readable identity of a sample for error messages."""
    idx = get_field(sample, 'sample_idx')
    img_id = get_field(sample, 'img_id')
    parts = []
    if idx is not None:
        parts.append(f'sample_idx={idx}')
    if img_id is not None:
        parts.append(f'img_id={img_id}')
    return 'sample(' + (', '.join(parts) or 'unidentified') + ')'


def to_tensor(value: Any, sample: Any, field: str, device: Optional[torch.device] = None) -> Tensor:
    """Tensor view of a field value (tensor, numpy array, list, mmdet boxes or BitmapMasks)."""
    if type(value) is Tensor:  # the common case, kept cheap (hot path)
        return value if device is None or value.device == device else value.to(device)
    if hasattr(value, 'tensor') and isinstance(getattr(value, 'tensor'), Tensor):  # mmdet BaseBoxes
        value = value.tensor
    elif hasattr(value, 'to_ndarray'):  # mmdet BitmapMasks / PolygonMasks
        value = value.to_ndarray()
    try:
        tensor = value if isinstance(value, Tensor) else torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError) as err:
        raise ValueError(f'{sample_name(sample)}: field `{field}` is not array-like ({err})') from None
    return tensor.to(device) if device is not None and tensor.device != device else tensor


def require(sample: Any, path: str, device: Optional[torch.device] = None) -> Tensor:
    """Tensor at a dotted ``path`` such as ``'pred_relations.pair_idxs'``; ValueError when missing."""
    *parents, key = path.split('.')
    container = sample
    for part in parents:
        container = get_field(container, part)
    return _member(container, key, sample, path, device)


def _member(container: Any, key: str, sample: Any, path: str, device: Optional[torch.device]) -> Tensor:
    """Tensor ``container.key`` (``path`` names it in errors; a None container counts as missing)."""
    value = container.get(key) if type(container) is dict else get_field(container, key)
    if value is None:
        raise ValueError(f'{sample_name(sample)}: missing field `{path}`')
    if type(value) is Tensor and (device is None or value.device == device):
        return value
    return to_tensor(value, sample, path, device)


def optional(sample: Any, path: str, device: Optional[torch.device] = None) -> Optional[Tensor]:
    """Tensor at a dotted ``path`` or None when any part is absent."""
    obj = sample
    for part in path.split('.'):
        obj = get_field(obj, part)
        if obj is None:
            return None
    return to_tensor(obj, sample, path, device)


def check_boxes(boxes: Tensor, sample: Any, field: str) -> Tensor:
    """Validate xyxy boxes [N, 4]: finite, x2 >= x1, y2 >= y1. Returns float32."""
    if boxes.numel() == 0:
        return boxes.reshape(0, 4).float()
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise ValueError(f'{sample_name(sample)}: `{field}` must have shape [N, 4] (xyxy), '
                         f'got {list(boxes.shape)}')
    boxes = boxes.float()
    if not torch.isfinite(boxes).all():
        raise ValueError(f'{sample_name(sample)}: `{field}` contains NaN or inf')
    bad = (boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1])
    if bad.any():
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f'{sample_name(sample)}: `{field}`[{row}] = {boxes[row].tolist()} has x2 < x1 or '
                         f'y2 < y1 (boxes must be xyxy in original image pixels)')
    return boxes


def check_labels(labels: Tensor, count: int, num: int, sample: Any, field: str, what: str) -> Tensor:
    """Validate 0-based integer labels [count] in [0, num)."""
    labels = labels.reshape(-1)
    if labels.numel() != count:
        raise ValueError(f'{sample_name(sample)}: `{field}` has {labels.numel()} entries, expected {count}')
    if labels.is_floating_point():
        if not torch.equal(labels, labels.round()):
            raise ValueError(f'{sample_name(sample)}: `{field}` must hold integer {what} indices')
    labels = labels.long()
    if labels.numel() and (labels.min() < 0 or labels.max() >= num):
        bad = labels[(labels < 0) | (labels >= num)][0].item()
        raise ValueError(f'{sample_name(sample)}: `{field}` has {what} index {bad} outside [0, {num}) '
                         f'(labels are 0-based into dataset_meta)')
    return labels


def check_pairs(pairs: Tensor, num_objects: int, sample: Any, field: str) -> Tensor:
    """Validate int64 pair indices [R, 2] into a list of ``num_objects`` objects."""
    if pairs.numel() == 0:
        return pairs.reshape(0, 2).long()
    if pairs.dim() != 2 or pairs.shape[1] != 2:
        raise ValueError(f'{sample_name(sample)}: `{field}` must have shape [R, 2], got {list(pairs.shape)}')
    pairs = pairs.long()
    if pairs.min() < 0 or pairs.max() >= num_objects:
        bad = pairs[((pairs < 0) | (pairs >= num_objects)).any(1)][0].tolist()
        raise ValueError(f'{sample_name(sample)}: `{field}` has pair {bad} with an index outside '
                         f'[0, {num_objects}) (the object list has {num_objects} entries)')
    return pairs


def check_finite(values: Tensor, sample: Any, field: str) -> Tensor:
    if values.numel() and not torch.isfinite(values).all():
        raise ValueError(f'{sample_name(sample)}: `{field}` contains NaN or inf')
    return values


def sample_index(sample: Any) -> Optional[int]:
    idx = get_field(sample, 'sample_idx')
    return None if idx is None else int(idx)


@dataclass
class SceneGraphBatch:
    """A batch of B scene-graph samples, ready for the functional layer.

    Objects: N predicted / M GT per image (padded). Relations: R predicted pairs, G GT relations (padded).
    Predicate scores (entries that are not candidates, in single-label rows, are ``-inf``): fixed-size
    small batches are stacked once (``rel_dense`` [B, R, P], a view without the background column, and
    ``rel_flat`` its [B * R, P] view); other small batches are concatenated (``rel_flat``); large SGDet
    batches are NOT copied: ``rel_score_list[b]`` is image b's [R_b, P] view of the input.
    :meth:`score_rows` gathers selected rows.
    ``gc_prob`` [B, R] is the best non-background probability of each pair; :meth:`gc_predicate_at` gives
    the graph-constrained predicate (first maximal column) of selected pairs. All labels are 0-based; boxes are xyxy in
    the original image frame (float32).
    """
    sample_idx: Tensor          # [B] int64
    pred_boxes: Tensor          # [B, N, 4]
    pred_labels: Tensor         # [B, N] (-1 padding)
    pred_scores: Tensor         # [B, N] float32
    gt_boxes: Tensor            # [B, M, 4]
    gt_labels: Tensor           # [B, M] (-1 padding)
    gt_pairs: Tensor            # [B, G, 2]
    gt_predicates: Tensor       # [B, G]
    gt_valid: Tensor            # [B, G] bool
    rel_pairs: Tensor           # [B, R, 2]
    rel_valid: Tensor           # [B, R] bool
    num_rel_preds: Tensor       # [B] int64
    rel_score_list: Optional[List[Tensor]]  # B x [R_b, P] float32 views (None when stacked)
    gc_prob: Tensor             # [B, R] float32 (0 padding)
    num_predicate_classes: int  # P
    pred_masks: Optional[List[Tensor]] = None
    gt_masks: Optional[List[Tensor]] = None
    rel_flat: Optional[Tensor] = None   # [sum R, P] concatenation, kept for small batches only
    rel_start: Optional[Tensor] = None  # [B] first row of each image in rel_flat
    rel_dense: Optional[Tensor] = None  # [B, R, P] view when every image has R pairs (small batches)
    gc_pred: Optional[Tensor] = None    # [B, R] first maximal column of every pair (small batches)
    has_single_label: bool = False      # some rows hold -inf (single-label input)

    @property
    def device(self) -> torch.device:
        return self.rel_valid.device

    @property
    def num_predicates(self) -> int:
        return self.num_predicate_classes

    def gc_predicate_at(self, order: Tensor, valid: Tensor) -> Tensor:
        """Graph-constrained predicate (first maximal non-background column) of pairs ``order`` [B, K].

        Only the selected rows are arg-maxed (SGDet score matrices are large); invalid entries get 0.
        """
        if self.gc_pred is not None:
            return torch.where(valid, self.gc_pred.gather(1, order), torch.zeros_like(order))
        image, k = valid.nonzero(as_tuple=True)
        out = torch.zeros_like(order)
        if image.numel():
            out[image, k] = self.score_rows(image, order[image, k]).argmax(dim=1)
        return out

    def score_rows(self, image: Tensor, pos: Tensor) -> Tensor:
        """Score rows of (image[i], pos[i]) -> [n, P]; ``image`` must be non-decreasing."""
        if self.rel_flat is not None:
            return self.rel_flat[self.rel_start[image] + pos]
        counts = torch.bincount(image, minlength=len(self.rel_score_list)).tolist()  # not small: a list
        parts = [m[p] for m, p, c in zip(self.rel_score_list, torch.split(pos, counts), counts) if c]
        if not parts:
            return torch.zeros((0, self.num_predicates), device=self.device)
        return torch.cat(parts)


def _pad(tensors: Sequence[Any], value: float) -> Tensor:
    """[B, L, ...] batch of tensors [L_b, ...]: one stacked copy when every L_b is equal (fixed-size outputs),
    else padded with ``value``. mmdet boxes objects are taken by their tensors; irregular trailing shapes,
    dtypes or devices raise (RuntimeError / TypeError / ValueError)."""
    tensors = list(tensors)
    try:
        return torch.stack(tensors)
    except TypeError:  # e.g. HorizontalBoxes: take their tensors
        return _pad([t if type(t) is Tensor else to_tensor(t, None, '') for t in tensors], value)
    except RuntimeError:  # different lengths (or devices, or trailing shapes: re-raised by pad_sequence)
        return pad_sequence(tensors, batch_first=True, padding_value=value)


def read_scene_graph(sample: Any, mode: str, num_classes: int, num_predicates: int,
                     with_masks: bool = False, device: Optional[torch.device] = None,
                     validate: bool = True) -> dict:
    """Read one sample into tensors (see :class:`SceneGraphBatch` for their meaning).

    Mode substitution (SPEC 2.1): PredCls uses the GT boxes, GT labels and object scores 1; SGCls the GT
    boxes with predicted labels/scores; SGDet/PhrDet everything predicted. Shapes are always checked;
    ``validate=False`` skips the value checks (finite, ranges, box order) that
    :func:`collate_scene_graphs` runs once on the whole padded batch instead.
    """
    if mode not in MODES:
        raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
    if get_field(sample, 'pred_relations') is None:
        raise ValueError(f'{sample_name(sample)}: missing field `pred_relations` (the model must output '
                         f'pred_relations.pair_idxs and pred_relations.scores)')
    produced = get_field(sample, 'pred_mode')
    if produced in _STRENGTH and _STRENGTH[produced] < _STRENGTH[mode]:
        raise ValueError(f'{sample_name(sample)}: the model produced {produced} predictions (metainfo '
                         f'`pred_mode`), but the metric evaluates {mode!r}: {mode} needs predicted '
                         f'{"boxes, labels and scores" if mode in ("sgdet", "phrdet") else "labels and scores"} '
                         f'in `pred_instances`; set the metric mode to {produced!r} or use a model that predicts '
                         f'them')
    gt_instances, gt_relations = get_field(sample, 'gt_instances'), get_field(sample, 'gt_relations')
    pred_instances, pred_relations = get_field(sample, 'pred_instances'), get_field(sample, 'pred_relations')
    rel_scores = _member(pred_relations, 'scores', sample, 'pred_relations.scores', device)
    device = rel_scores.device
    boxes_check = check_boxes if validate else _shape_boxes
    gt_boxes = boxes_check(_member(gt_instances, 'bboxes', sample, 'gt_instances.bboxes', device), sample,
                           'gt_instances.bboxes')
    num_gt_objects = gt_boxes.shape[0]
    gt_labels = _labels(_member(gt_instances, 'labels', sample, 'gt_instances.labels', device), num_gt_objects,
                        num_classes, sample, 'gt_instances.labels', 'class', validate)
    gt_pairs = _pairs(_member(gt_relations, 'pair_idxs', sample, 'gt_relations.pair_idxs', device), num_gt_objects,
                      sample, 'gt_relations.pair_idxs', validate)
    gt_predicates = _labels(_member(gt_relations, 'labels', sample, 'gt_relations.labels', device),
                            gt_pairs.shape[0], num_predicates, sample, 'gt_relations.labels', 'predicate', validate)

    if mode == 'predcls':
        num_pred = optional(sample, 'pred_instances.bboxes', device)
        if num_pred is not None and num_pred.shape[0] not in (0, num_gt_objects):
            raise ValueError(f'{sample_name(sample)}: PredCls expects pred_instances on the GT boxes '
                             f'({num_gt_objects}), got {num_pred.shape[0]} (field `pred_instances.bboxes`)')
        pred_boxes, pred_labels = gt_boxes, gt_labels
        pred_scores = torch.ones(num_gt_objects, device=device)
    else:
        if pred_instances is None:
            raise ValueError(f'{sample_name(sample)}: mode {mode!r} needs `pred_instances` '
                             f'(labels and scores{", boxes" if mode in ("sgdet", "phrdet") else ""})')
        pred_labels_raw = _member(pred_instances, 'labels', sample, 'pred_instances.labels', device)
        count = num_gt_objects
        if mode == 'sgcls':
            pred_boxes = gt_boxes
        else:
            pred_boxes = boxes_check(_member(pred_instances, 'bboxes', sample, 'pred_instances.bboxes', device),
                                     sample, 'pred_instances.bboxes')
            count = pred_boxes.shape[0]
        pred_labels = _labels(pred_labels_raw, count, num_classes, sample, 'pred_instances.labels', 'class',
                              validate)
        pred_scores = _member(pred_instances, 'scores', sample, 'pred_instances.scores', device).float().reshape(-1)
        if validate:
            check_finite(pred_scores, sample, 'pred_instances.scores')
        if pred_scores.shape[0] != count:
            raise ValueError(f'{sample_name(sample)}: `pred_instances.scores` has {pred_scores.numel()} '
                             f'entries, expected {count}')
    num_objects = pred_boxes.shape[0]
    rel_pairs = _pairs(_member(pred_relations, 'pair_idxs', sample, 'pred_relations.pair_idxs', device),
                       num_objects, sample, 'pred_relations.pair_idxs', validate)
    num_rel = rel_pairs.shape[0]
    rel_scores = rel_scores.float()
    if validate:
        check_finite(rel_scores, sample, 'pred_relations.scores')
    single_label = rel_scores.dim() == 1 or (rel_scores.dim() == 2 and rel_scores.shape[1] == 1
                                             and optional(sample, 'pred_relations.labels') is not None)
    if single_label:
        labels = optional(sample, 'pred_relations.labels', device)
        if labels is None:
            raise ValueError(f'{sample_name(sample)}: `pred_relations.scores` is 1-D, which needs '
                             f'`pred_relations.labels` (0-based predicates)')
        if rel_scores.numel() != num_rel:
            raise ValueError(f'{sample_name(sample)}: `pred_relations.scores` has {rel_scores.numel()} '
                             f'entries for {num_rel} pairs')
        labels = check_labels(labels, num_rel, num_predicates, sample, 'pred_relations.labels', 'predicate')
        dense = torch.full((num_rel, num_predicates), float('-inf'), device=device)
        given_scores = rel_scores.reshape(-1)
        dense[torch.arange(num_rel, device=device), labels] = given_scores
        rel_scores = dense
    else:
        if rel_scores.dim() != 2 or rel_scores.shape[0] != num_rel or \
                rel_scores.shape[1] not in (num_predicates, num_predicates + 1):
            raise ValueError(
                f'{sample_name(sample)}: `pred_relations.scores` has shape {list(rel_scores.shape)}; expected '
                f'[{num_rel}, {num_predicates + 1}] (column 0 = no relation) or [{num_rel}, {num_predicates}] '
                f'for {num_predicates} predicates, or [{num_rel}] with `pred_relations.labels`')
    out = dict(sample_idx=sample_index(sample), pred_boxes=pred_boxes, pred_labels=pred_labels,
               pred_scores=pred_scores, gt_boxes=gt_boxes, gt_labels=gt_labels, gt_pairs=gt_pairs,
               gt_predicates=gt_predicates, rel_pairs=rel_pairs, rel_scores=rel_scores, single_label=single_label,
               background=int(rel_scores.shape[1] == num_predicates + 1))
    if single_label:
        out['given_scores'] = given_scores
    if with_masks:
        gt_masks = require(sample, 'gt_instances.masks', device).bool()
        if mode in ('sgdet', 'phrdet'):
            pred_masks = require(sample, 'pred_instances.masks', device).bool()
            if pred_masks.shape[0] != num_objects:
                raise ValueError(f'{sample_name(sample)}: `pred_instances.masks` has {pred_masks.shape[0]} '
                                 f'masks for {num_objects} boxes')
        else:
            pred_masks = gt_masks
        if gt_masks.shape[0] != num_gt_objects:
            raise ValueError(f'{sample_name(sample)}: `gt_instances.masks` has {gt_masks.shape[0]} masks for '
                             f'{num_gt_objects} boxes')
        out.update(gt_masks=gt_masks, pred_masks=pred_masks)
    return out


def _shape_boxes(boxes: Tensor, sample: Any, field: str) -> Tensor:
    if boxes.dim() == 2 and boxes.shape[1] == 4:
        return boxes.float()
    if boxes.numel() == 0:
        return boxes.reshape(0, 4).float()
    return check_boxes(boxes, sample, field)  # raises the shape error


def _labels(labels: Tensor, count: int, num: int, sample: Any, field: str, what: str, validate: bool) -> Tensor:
    if validate or labels.is_floating_point() or labels.dim() != 1 or labels.shape[0] != count:
        return check_labels(labels, count, num, sample, field, what)
    return labels.long()


def _pairs(pairs: Tensor, num_objects: int, sample: Any, field: str, validate: bool) -> Tensor:
    if validate or pairs.dim() != 2 or pairs.shape[1] != 2:
        return check_pairs(pairs, num_objects, sample, field)
    return pairs.long()


def _lengths_mask(lengths: Sequence[int], width: int, device: torch.device) -> Tensor:
    lengths_t = torch.tensor(list(lengths), dtype=torch.long, device=device)
    return torch.arange(width, device=device)[None, :] < lengths_t[:, None]


def _valid_mask(lengths: Optional[List[int]], batch: int, width: int, device: torch.device) -> Tensor:
    """[B, width] True on real entries; ``lengths`` None = every image has ``width`` entries."""
    if lengths is None:
        return torch.ones((batch, width), dtype=torch.bool, device=device)
    return _lengths_mask(lengths, width, device)


@dataclass
class _Padded:
    """The fields of a batch padded to [B, ...], with per-image lengths (None = all equal, no padding)."""
    sample_idx: Tensor
    pred_boxes: Tensor
    pred_labels: Tensor
    pred_scores: Tensor
    gt_boxes: Tensor
    gt_labels: Tensor
    gt_pairs: Tensor
    gt_predicates: Tensor
    rel_pairs: Tensor
    num_pred: Optional[List[int]]
    num_gt: Optional[List[int]]
    num_gt_rel: Optional[List[int]]
    num_rel: List[int]
    raw_scores: List[Tensor]        # per image [R_b, P] or [R_b, P + 1] (single-label rows densified)
    background: List[int]
    single_label: List[bool]
    given_scores: List[Tensor]      # the 1-D scores of single-label images
    pred_masks: Optional[List[Tensor]] = None
    gt_masks: Optional[List[Tensor]] = None


def _lengths(tensors: List[Any], padded: Tensor) -> Optional[List[int]]:
    """Per-image lengths, or None when they are all equal (no padding)."""
    lengths = [len(t) for t in tensors]
    return None if lengths.count(padded.shape[1]) == len(lengths) else lengths


class _NotFast(Exception):
    """A batch the fast reader leaves to :func:`read_scene_graph` (which also names any bad field)."""


def _fast_padded(samples: Sequence[Any], mode: str, num_predicates: int,
                 device: Optional[torch.device]) -> _Padded:
    """Read a batch of well-formed dict samples (what MMEngine's evaluator passes: ``DataSample.to_dict()``)
    field by field, without the per-sample reader; raises :class:`_NotFast` for anything else (other
    containers, single-label scores, shape or dtype surprises, mode mismatches)."""
    pred_boxes_list = None
    try:
        gt_inst = [s['gt_instances'] for s in samples]
        gt_rel = [s['gt_relations'] for s in samples]
        pred_rel = [s['pred_relations'] for s in samples]
        produced = {s.get('pred_mode') for s in samples}
        sample_idx = [s.get('sample_idx') for s in samples]
        gt_boxes_list = [c['bboxes'] for c in gt_inst]
        gt_labels_list = [c['labels'] for c in gt_inst]
        gt_pairs_list = [c['pair_idxs'] for c in gt_rel]
        gt_pred_list = [c['labels'] for c in gt_rel]
        rel_pairs_list = [c['pair_idxs'] for c in pred_rel]
        scores_list = [c['scores'] for c in pred_rel]
        if mode != 'predcls':
            pred_inst = [s['pred_instances'] for s in samples]
            pred_labels_list = [c['labels'] for c in pred_inst]
            pred_scores_list = [c['scores'] for c in pred_inst]
            pred_boxes_list = [c['bboxes'] for c in pred_inst] if mode in ('sgdet', 'phrdet') else None
        else:
            pred_inst = [s.get('pred_instances') for s in samples]
    except (KeyError, TypeError, AttributeError) as err:
        raise _NotFast from err
    if any(p in _STRENGTH and _STRENGTH[p] < _STRENGTH[mode] for p in produced):
        raise _NotFast
    try:
        gt_boxes = _pad(gt_boxes_list, 0.0)
        gt_labels = _pad(gt_labels_list, -1)
        gt_pairs = _pad(gt_pairs_list, 0)
        gt_predicates = _pad(gt_pred_list, -1)
        rel_pairs = _pad(rel_pairs_list, 0)
        if mode != 'predcls':
            pred_labels = _pad(pred_labels_list, -1)
            pred_scores = _pad(pred_scores_list, 0.0)
        if pred_boxes_list is not None:
            pred_boxes = _pad(pred_boxes_list, 0.0)
        num_gt = _lengths(gt_boxes_list, gt_boxes)
        num_gt_rel = _lengths(gt_pairs_list, gt_pairs)
        num_rel = [len(t) for t in rel_pairs_list]
    except (RuntimeError, TypeError, ValueError) as err:  # len() of a 0-d value: TypeError
        raise _NotFast from err
    ok = (gt_boxes.dim() == 3 and gt_boxes.shape[2] == 4 and gt_labels.dim() == 2 and gt_pairs.dim() == 3
          and gt_pairs.shape[2] == 2 and gt_predicates.dim() == 2 and rel_pairs.dim() == 3 and rel_pairs.shape[2] == 2
          and not (gt_labels.is_floating_point() or gt_pairs.is_floating_point()
                   or gt_predicates.is_floating_point() or rel_pairs.is_floating_point())
          and _lengths(gt_labels_list, gt_labels) == num_gt and _lengths(gt_pred_list, gt_predicates) == num_gt_rel
          and all(type(t) is Tensor and t.dim() == 2 and t.shape[0] == r and t.shape[1] in
                  (num_predicates, num_predicates + 1) and t.shape[1] != 1 for t, r in zip(scores_list, num_rel)))
    if not ok:
        raise _NotFast
    batch = gt_boxes.shape[0]
    if mode == 'predcls':
        counts = [getattr(get_field(p, 'bboxes'), 'shape', (0,))[0] for p in pred_inst]
        if any(c not in (0, m) for c, m in zip(counts, num_gt or [gt_boxes.shape[1]] * batch)):
            raise _NotFast  # predicted objects that are not the GT boxes: the per-sample reader explains
        pred_boxes, pred_labels, num_pred = gt_boxes, gt_labels, num_gt
        pred_scores = _valid_mask(num_gt, batch, gt_boxes.shape[1], gt_boxes.device).float()
    else:
        if mode == 'sgcls':
            pred_boxes, num_pred = gt_boxes, num_gt
        else:
            if pred_boxes.dim() != 3 or pred_boxes.shape[2] != 4:
                raise _NotFast
            num_pred = _lengths(pred_boxes_list, pred_boxes)
        if (pred_labels.dim() != 2 or pred_labels.is_floating_point() or pred_scores.dim() != 2
                or pred_labels.shape[1] != pred_boxes.shape[1] or pred_scores.shape[1] != pred_boxes.shape[1]
                or _lengths(pred_labels_list, pred_labels) != num_pred
                or _lengths(pred_scores_list, pred_scores) != num_pred):
            raise _NotFast
    try:
        idx = torch.tensor([-1 if i is None else int(i) for i in sample_idx], dtype=torch.long)
    except (TypeError, ValueError) as err:
        raise _NotFast from err
    fields = [gt_boxes.float(), gt_labels.long(), gt_pairs.long(), gt_predicates.long(), rel_pairs.long(),
              pred_boxes.float(), pred_labels.long(), pred_scores.float()]
    target = device or scores_list[0].device
    if any(f.device != target for f in fields):
        fields = [f.to(target) for f in fields]
    if any(t.device != target for t in scores_list):
        scores_list = [t.to(target) for t in scores_list]
    gt_boxes, gt_labels, gt_pairs, gt_predicates, rel_pairs, pred_boxes, pred_labels, pred_scores = fields
    return _Padded(sample_idx=idx.to(target), pred_boxes=pred_boxes, pred_labels=pred_labels,
                   pred_scores=pred_scores, gt_boxes=gt_boxes, gt_labels=gt_labels, gt_pairs=gt_pairs,
                   gt_predicates=gt_predicates, rel_pairs=rel_pairs, num_pred=num_pred, num_gt=num_gt,
                   num_gt_rel=num_gt_rel, num_rel=num_rel,
                   raw_scores=[t if t.dtype == torch.float32 else t.float() for t in scores_list],
                   background=[int(t.shape[1] == num_predicates + 1) for t in scores_list],
                   single_label=[False] * batch, given_scores=[])


def _padded_from_items(items: List[dict], with_masks: bool, device: torch.device) -> _Padded:
    """Pad the per-sample dicts of :func:`read_scene_graph`."""
    if any(it['rel_scores'].device != device or it['gt_boxes'].device != device for it in items):
        items = [{k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in it.items()} for it in items]

    def column(name: str, value: float) -> Tensor:
        return _pad([it[name] for it in items], value) if items else torch.zeros(0, device=device)

    return _Padded(
        sample_idx=torch.tensor([-1 if it['sample_idx'] is None else it['sample_idx'] for it in items],
                                dtype=torch.long, device=device),
        pred_boxes=column('pred_boxes', 0.0), pred_labels=column('pred_labels', -1),
        pred_scores=column('pred_scores', 0.0), gt_boxes=column('gt_boxes', 0.0), gt_labels=column('gt_labels', -1),
        gt_pairs=column('gt_pairs', 0), gt_predicates=column('gt_predicates', -1), rel_pairs=column('rel_pairs', 0),
        num_pred=[it['pred_boxes'].shape[0] for it in items], num_gt=[it['gt_boxes'].shape[0] for it in items],
        num_gt_rel=[it['gt_predicates'].shape[0] for it in items],
        num_rel=[it['rel_pairs'].shape[0] for it in items], raw_scores=[it['rel_scores'] for it in items],
        background=[it['background'] for it in items], single_label=[it['single_label'] for it in items],
        given_scores=[it['given_scores'] for it in items if it['single_label']],
        pred_masks=[it['pred_masks'] for it in items] if with_masks else None,
        gt_masks=[it['gt_masks'] for it in items] if with_masks else None)


def _batch_is_valid(b: 'SceneGraphBatch', p: _Padded, num_classes: int, num_predicates: int,
                    stacked_scores: Optional[Tensor]) -> bool:
    """Every value check of :func:`read_scene_graph` at once on the padded batch (one host sync).

    Each check is a min/max over the batch (padding masked out only where images differ in length).
    Score matrices too large to stack (SGDet with all pairs) are not read again: NaN or +inf in a predicate
    column shows in the row maxima ``gc_prob`` (max propagates NaN), and a -inf entry only ranks last.
    """
    device = b.rel_valid.device
    batch = b.rel_valid.shape[0]
    lows, highs, finite = [], [], []

    def within(values: Tensor, lengths: Optional[List[int]], low: int, high: Union[int, Tensor]) -> None:
        """Expect low <= values < high (``high`` an int or per image [B, 1, 1]) on real entries."""
        if values.numel() == 0:
            return
        if lengths is None and isinstance(high, int):
            low_value, high_value = torch.aminmax(values)
            lows.append(low_value - low)
            highs.append(high_value - high + 1)
            return
        below = values - high  # must be < 0
        if lengths is not None:
            mask = _lengths_mask(lengths, values.shape[1], device).view(batch, -1, *([1] * (values.dim() - 2)))
            values = torch.where(mask, values, torch.full_like(values, low))
            below = torch.where(mask, below, torch.full_like(below, -1))
        lows.append(values.amin() - low)
        highs.append(below.amax() + 1)

    for boxes in (b.pred_boxes, b.gt_boxes):
        if boxes.numel():
            finite.extend(torch.aminmax(boxes))
            lows.append((boxes[..., 2:] >= boxes[..., :2]).all().long() - 1)  # x2 < x1 or y2 < y1: -1
    if b.pred_scores.numel():
        finite.extend(torch.aminmax(b.pred_scores))
    within(b.pred_labels, p.num_pred, 0, num_classes)
    within(b.gt_labels, p.num_gt, 0, num_classes)
    within(b.gt_predicates, p.num_gt_rel, 0, num_predicates)
    within(b.gt_pairs, p.num_gt_rel, 0, _bound(p.num_gt, b.gt_boxes.shape[1], device))
    within(b.rel_pairs, None if all(r == b.rel_valid.shape[1] for r in p.num_rel) else p.num_rel, 0,
           _bound(p.num_pred, b.pred_boxes.shape[1], device))
    if stacked_scores is not None and stacked_scores.numel():
        finite.extend(torch.aminmax(stacked_scores))  # min/max propagate NaN and expose +-inf
    elif b.rel_flat is None and b.gc_prob.numel():
        finite.extend(torch.aminmax(b.gc_prob))
    checks = []
    if lows:
        checks.append((torch.stack([v.long() for v in lows]) >= 0).all())
    if highs:
        checks.append((torch.stack([v.long() for v in highs]) <= 0).all())
    if finite:
        checks.append(torch.isfinite(torch.stack([v.float() for v in finite])).all())
    if checks and not bool(torch.stack(checks).all()):
        return False
    if stacked_scores is None and b.rel_flat is not None:
        dense = [m for m, single in zip(p.raw_scores, p.single_label) if not single and m.numel()]
        if dense and not bool(torch.isfinite(torch.stack([torch.stack(torch.aminmax(m)) for m in dense])).all()):
            return False
    # single-label rows were densified with -inf on purpose; their given scores are checked here
    return all(bool(torch.isfinite(s).all()) for s in p.given_scores)


def _bound(lengths: Optional[List[int]], width: int, device: torch.device):
    """Exclusive upper bound of object indices: ``width`` for all images, or per image [B, 1, 1]."""
    if lengths is None or all(n == width for n in lengths):
        return width
    return torch.tensor(lengths, dtype=torch.long, device=device)[:, None, None]


# Up to this many score rows a batch is stacked / concatenated once and ranked as a whole; above, each image's
# matrix stays a view and only the candidate pairs of the no-graph-constraint list are gathered. On the CPU
# the views path is faster for SGDet with all pairs (it ranks a pruned list); on a GPU whole-batch kernels win.
SMALL_BATCH_ROWS = 32768
SMALL_BATCH_ROWS_GPU = 1 << 22  # ~850 MB of 51-column float32 scores


def _best_probability(mats: List[Tensor], num_rel: List[int], device: torch.device) -> Tensor:
    """Padded [B, R] best non-background probability of each pair (reduced per image for large matrices)."""
    if not mats:
        return torch.zeros((0, 0), device=device)
    if mats[0].shape[1] == 0:
        return torch.zeros((len(mats), max(num_rel)), device=device)
    return _pad([m.amax(dim=1) for m in mats], 0.0)


def collate_scene_graphs(samples: Sequence[Any], mode: str, num_classes: int, num_predicates: int,
                         with_masks: bool = False, device: Optional[torch.device] = None) -> SceneGraphBatch:
    """Read a list of samples and pad them into one validated :class:`SceneGraphBatch`.

    Well-formed dict samples are read field by field; anything else goes through :func:`read_scene_graph`.
    Value checks run once on the padded batch; when one fails, the samples are re-read one by one with
    full validation so the error names the sample and the field. Fixed-size outputs (every image with the
    same number of pairs and score columns) are stacked once and reduced with one ``max``.
    """
    if mode not in MODES:
        raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
    padded = None
    if samples and not with_masks:
        try:
            padded = _fast_padded(samples, mode, num_predicates, device)
        except _NotFast:
            padded = None
    if padded is None:
        items = [read_scene_graph(s, mode, num_classes, num_predicates, with_masks, device, validate=False)
                 for s in samples]
        device = items[0]['rel_pairs'].device if items else (device or torch.device('cpu'))
        padded = _padded_from_items(items, with_masks, device)
    device = padded.sample_idx.device
    batch_size = len(padded.num_rel)
    num_rel = padded.num_rel
    max_rel = max(num_rel) if num_rel else 0
    raw = padded.raw_scores
    num_rel_t = torch.tensor(num_rel, dtype=torch.long, device=device)
    limit = SMALL_BATCH_ROWS if device.type == 'cpu' else SMALL_BATCH_ROWS_GPU
    small = bool(num_rel) and sum(num_rel) <= limit
    stacked = dense = flat = gc_pred = mats = None
    if small and all(m.shape == raw[0].shape for m in raw) and len(set(padded.background)) == 1:
        stacked = torch.stack(raw)  # one copy; views drop the background column
        dense = stacked[..., padded.background[0]:]
        flat = dense.reshape(-1, num_predicates)
    else:
        mats = [m[:, bg:] for m, bg in zip(raw, padded.background)]
        if small:
            flat = torch.cat(mats)
    if flat is not None and num_predicates and flat.shape[0]:
        values, gc_pred = flat.max(dim=1)  # the first maximal column, as argmax
        if dense is not None:
            gc_prob, gc_pred = values.view(dense.shape[:2]), gc_pred.view(dense.shape[:2])
        else:
            gc_prob, gc_pred = _pad(torch.split(values, num_rel), 0.0), _pad(torch.split(gc_pred, num_rel), 0)
    elif mats is not None:
        gc_prob = _best_probability(mats, num_rel, device)
    else:
        gc_prob = torch.zeros((batch_size, max_rel), device=device)
    batch = SceneGraphBatch(
        sample_idx=padded.sample_idx, pred_boxes=padded.pred_boxes, pred_labels=padded.pred_labels,
        pred_scores=padded.pred_scores, gt_boxes=padded.gt_boxes, gt_labels=padded.gt_labels,
        gt_pairs=padded.gt_pairs, gt_predicates=padded.gt_predicates,
        gt_valid=_valid_mask(padded.num_gt_rel, batch_size, padded.gt_predicates.shape[1] if batch_size else 0,
                             device),
        rel_pairs=padded.rel_pairs, rel_valid=_valid_mask(None if max_rel and all(r == max_rel for r in num_rel)
                                                          else num_rel, batch_size, max_rel, device),
        num_rel_preds=num_rel_t, rel_score_list=mats, rel_flat=flat,
        rel_start=torch.cumsum(num_rel_t, 0) - num_rel_t, rel_dense=dense, gc_pred=gc_pred,
        has_single_label=any(padded.single_label), gc_prob=gc_prob, num_predicate_classes=num_predicates,
        pred_masks=padded.pred_masks, gt_masks=padded.gt_masks)
    if not _batch_is_valid(batch, padded, num_classes, num_predicates,
                           None if batch.has_single_label else stacked):
        for s in samples:  # raises the precise error
            read_scene_graph(s, mode, num_classes, num_predicates, with_masks, device, validate=True)
        raise ValueError('invalid values in the batch of samples '
                         + ', '.join(sample_name(s) for s in samples))
    return batch
