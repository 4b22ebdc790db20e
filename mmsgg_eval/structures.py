"""Reading and validating data samples (SPEC section 1).

Metrics receive MMEngine data samples (``DetDataSample`` or their ``to_dict()`` form, or plain dicts of
numpy arrays in offline evaluation). This module turns them into typed tensors, checks them, and raises a
``ValueError`` naming the sample (``sample_idx`` / ``img_id``) and the offending field on bad input.
"""
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

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
    obj = sample
    for part in path.split('.'):
        obj = get_field(obj, part)
        if obj is None:
            raise ValueError(f'{sample_name(sample)}: missing field `{path}`')
    return to_tensor(obj, sample, path, device)


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
    Predicate scores are NOT padded or copied (SGDet score matrices are large): ``rel_score_list[b]`` is
    image b's [R_b, P] matrix without the background column (a view of the input); entries that are not
    candidates (single-label rows) are ``-inf``. :meth:`score_rows` gathers selected rows.
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
    rel_score_list: List[Tensor]  # B x [R_b, P] float32, -inf = not a candidate
    gc_prob: Tensor             # [B, R] float32 (0 padding)
    pred_masks: Optional[List[Tensor]] = None
    gt_masks: Optional[List[Tensor]] = None
    rel_flat: Optional[Tensor] = None   # [sum R, P] concatenation, kept for small batches only
    rel_start: Optional[Tensor] = None  # [B] first row of each image in rel_flat

    @property
    def device(self) -> torch.device:
        return self.rel_valid.device

    @property
    def num_predicates(self) -> int:
        return self.rel_score_list[0].shape[1] if self.rel_score_list else 0

    def gc_predicate_at(self, order: Tensor, valid: Tensor) -> Tensor:
        """Graph-constrained predicate (first maximal non-background column) of pairs ``order`` [B, K].

        Only the selected rows are arg-maxed (SGDet score matrices are large); invalid entries get 0.
        """
        image, k = valid.nonzero(as_tuple=True)
        out = torch.zeros_like(order)
        if image.numel():
            out[image, k] = self.score_rows(image, order[image, k]).argmax(dim=1)
        return out

    def score_rows(self, image: Tensor, pos: Tensor) -> Tensor:
        """Score rows of (image[i], pos[i]) -> [n, P]; ``image`` must be non-decreasing."""
        if self.rel_flat is not None:
            return self.rel_flat[self.rel_start[image] + pos]
        counts = torch.bincount(image, minlength=len(self.rel_score_list)).tolist()
        parts = [m[p] for m, p, c in zip(self.rel_score_list, torch.split(pos, counts), counts) if c]
        if not parts:
            return torch.zeros((0, self.num_predicates), device=self.device)
        return torch.cat(parts)


def _pad(tensors: Sequence[Tensor], value: float) -> Tensor:
    return pad_sequence(list(tensors), batch_first=True, padding_value=value)


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
    rel_scores = require(sample, 'pred_relations.scores', device)
    device = rel_scores.device
    boxes_check = check_boxes if validate else _shape_boxes
    gt_boxes = boxes_check(require(sample, 'gt_instances.bboxes', device), sample, 'gt_instances.bboxes')
    num_gt_objects = gt_boxes.shape[0]
    gt_labels = _labels(require(sample, 'gt_instances.labels', device), num_gt_objects, num_classes,
                        sample, 'gt_instances.labels', 'class', validate)
    gt_pairs = _pairs(require(sample, 'gt_relations.pair_idxs', device), num_gt_objects, sample,
                      'gt_relations.pair_idxs', validate)
    gt_predicates = _labels(require(sample, 'gt_relations.labels', device), gt_pairs.shape[0],
                            num_predicates, sample, 'gt_relations.labels', 'predicate', validate)

    pred_instances = get_field(sample, 'pred_instances')
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
        pred_labels_raw = require(sample, 'pred_instances.labels', device)
        count = num_gt_objects
        if mode == 'sgcls':
            pred_boxes = gt_boxes
        else:
            pred_boxes = boxes_check(require(sample, 'pred_instances.bboxes', device), sample,
                                     'pred_instances.bboxes')
            count = pred_boxes.shape[0]
        pred_labels = _labels(pred_labels_raw, count, num_classes, sample, 'pred_instances.labels', 'class',
                              validate)
        pred_scores = require(sample, 'pred_instances.scores', device).float().reshape(-1)
        if validate:
            check_finite(pred_scores, sample, 'pred_instances.scores')
        if pred_scores.shape[0] != count:
            raise ValueError(f'{sample_name(sample)}: `pred_instances.scores` has {pred_scores.numel()} '
                             f'entries, expected {count}')
    num_objects = pred_boxes.shape[0]
    rel_pairs = _pairs(require(sample, 'pred_relations.pair_idxs', device), num_objects, sample,
                       'pred_relations.pair_idxs', validate)
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


def _batch_is_valid(b: 'SceneGraphBatch', items: List[dict], num_classes: int, num_predicates: int) -> bool:
    """Every value check of :func:`read_scene_graph` at once on the padded batch (one host sync)."""
    device = b.rel_valid.device
    n_pred = [it['pred_boxes'].shape[0] for it in items]
    n_gt = [it['gt_boxes'].shape[0] for it in items]
    pred_valid = _lengths_mask(n_pred, b.pred_boxes.shape[1], device)
    gt_obj_valid = _lengths_mask(n_gt, b.gt_boxes.shape[1], device)
    bad = []
    for boxes in (b.pred_boxes, b.gt_boxes):
        bad.append(~torch.isfinite(boxes).all())
        bad.append(((boxes[..., 2] < boxes[..., 0]) | (boxes[..., 3] < boxes[..., 1])).any())
    bad.append(((b.pred_labels < 0) | (b.pred_labels >= num_classes))[pred_valid].any())
    bad.append(((b.gt_labels < 0) | (b.gt_labels >= num_classes))[gt_obj_valid].any())
    bad.append(~torch.isfinite(b.pred_scores).all())
    bad.append(((b.gt_predicates < 0) | (b.gt_predicates >= num_predicates))[b.gt_valid].any())
    n_gt_t = torch.tensor(n_gt, device=device)[:, None, None]
    bad.append(((b.gt_pairs < 0) | (b.gt_pairs >= n_gt_t)).any(-1)[b.gt_valid].any())
    n_pred_t = torch.tensor(n_pred, device=device)[:, None, None]
    bad.append(((b.rel_pairs < 0) | (b.rel_pairs >= n_pred_t)).any(-1)[b.rel_valid].any())
    if bool(torch.stack(bad).any()):
        return False
    dense = [it['rel_scores'] for it in items if not it['single_label'] and it['rel_scores'].numel()]
    # min/max propagate NaN and expose +-inf: one pass over each (contiguous) score matrix
    if dense and not bool(torch.isfinite(torch.stack([torch.stack(torch.aminmax(m)) for m in dense])).all()):
        return False
    # single-label rows were densified with -inf on purpose; their given scores were checked in
    # read_scene_graph only when validating, so check them here (they are small)
    return all(bool(torch.isfinite(it['given_scores']).all()) for it in items if it['single_label'])


SMALL_BATCH_ROWS = 32768  # below this many score rows a batch is concatenated once (cheap), above kept as views


def _best_probability(mats: List[Tensor], flat: Optional[Tensor], num_rel: List[int],
                      device: torch.device) -> Tensor:
    """Padded [B, R] best non-background probability of each pair (reduced per image for large matrices)."""
    if not mats:
        return torch.zeros((0, 0), device=device)
    if mats[0].shape[1] == 0:
        return torch.zeros((len(mats), max(num_rel)), device=device)
    if flat is not None:
        return _pad(torch.split(flat.amax(dim=1), num_rel), 0.0)
    return _pad([m.amax(dim=1) for m in mats], 0.0)


def collate_scene_graphs(samples: Sequence[Any], mode: str, num_classes: int, num_predicates: int,
                         with_masks: bool = False, device: Optional[torch.device] = None) -> SceneGraphBatch:
    """Read a list of samples and pad them into one validated :class:`SceneGraphBatch`.

    Value checks run once on the padded batch; when one fails, the samples are re-read one by one with
    full validation so the error names the sample and the field.
    """
    items = [read_scene_graph(s, mode, num_classes, num_predicates, with_masks, device, validate=False)
             for s in samples]
    device = items[0]['rel_pairs'].device if items else (device or torch.device('cpu'))
    if any(it['rel_scores'].device != device or it['gt_boxes'].device != device for it in items):
        items = [{k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in it.items()} for it in items]
    idx = torch.tensor([-1 if it['sample_idx'] is None else it['sample_idx'] for it in items],
                       dtype=torch.long, device=device)
    num_rel = [it['rel_pairs'].shape[0] for it in items]
    max_rel = max(num_rel) if items else 0
    gt_valid = _lengths_mask([it['gt_predicates'].shape[0] for it in items],
                             max((it['gt_predicates'].shape[0] for it in items), default=0), device)
    mats = [it['rel_scores'].reshape(-1, num_predicates + it['background'])[:, it['background']:] for it in items]
    num_rel_t = torch.tensor(num_rel, dtype=torch.long, device=device)
    rel_valid = _lengths_mask(num_rel, max_rel, device)
    flat = torch.cat(mats) if mats and sum(num_rel) <= SMALL_BATCH_ROWS else None
    gc_prob = _best_probability(mats, flat, num_rel, device)
    batch = SceneGraphBatch(
        sample_idx=idx,
        pred_boxes=_pad([it['pred_boxes'] for it in items], 0.0),
        pred_labels=_pad([it['pred_labels'] for it in items], -1),
        pred_scores=_pad([it['pred_scores'] for it in items], 0.0),
        gt_boxes=_pad([it['gt_boxes'] for it in items], 0.0),
        gt_labels=_pad([it['gt_labels'] for it in items], -1),
        gt_pairs=_pad([it['gt_pairs'] for it in items], 0),
        gt_predicates=_pad([it['gt_predicates'] for it in items], -1),
        gt_valid=gt_valid,
        rel_pairs=_pad([it['rel_pairs'] for it in items], 0),
        rel_valid=rel_valid,
        num_rel_preds=num_rel_t,
        rel_score_list=mats,
        rel_flat=flat,
        rel_start=torch.cumsum(num_rel_t, 0) - num_rel_t,
        gc_prob=gc_prob,
        pred_masks=[it['pred_masks'] for it in items] if with_masks else None,
        gt_masks=[it['gt_masks'] for it in items] if with_masks else None,
    )
    if not _batch_is_valid(batch, items, num_classes, num_predicates):
        for s in samples:  # raises the precise error
            read_scene_graph(s, mode, num_classes, num_predicates, with_masks, device, validate=True)
        raise ValueError('invalid values in the batch of samples '
                         + ', '.join(sample_name(s) for s in samples))
    return batch
