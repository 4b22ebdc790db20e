"""The field-wise reader of well-formed dict batches (what MMEngine's evaluator passes): each field of a pool
concatenated once and scattered into its padded tensor (:class:`_Padded`); a batch it cannot take raises
:class:`_NotFast` and goes to the per-sample reader (:mod:`.sample_reader`)."""
import operator
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional import compiled
from ..functional.scores import float32_copies
from .batch import _pad, _weaker, pad_with_lengths
from .fields import detached, get_field, only_tensors, sample_index, shared_tensors
from .pairs import RelationPairs
from .sample_reader import ObjectList, evaluated_objects, model_boxes_required


@dataclass
class _Padded:
    """The fields of a batch padded to [B, ...], with per-image lengths (None = all equal, no padding).

    Index fields keep the dtype they were given in (validated, then cast to int64, by the collation)."""
    sample_idx: List[Optional[int]]
    pred_boxes: Tensor
    pred_labels: Tensor
    pred_scores: Tensor
    gt_boxes: Tensor
    gt_labels: Tensor
    gt_pairs: Tensor
    gt_predicates: Tensor
    rel_pairs: RelationPairs
    num_pred: Optional[List[int]]
    num_gt: Optional[List[int]]
    num_gt_rel: Optional[List[int]]
    num_rel: List[int]
    raw_scores: List[Tensor]        # per image [R_b, P] or [R_b, P + 1] (single-label rows densified)
    background: List[int]
    single_label: List[bool]
    given_scores: List[Tensor]      # the 1-D scores of single-label images
    model_objects: List[int]        # PredCls / SGCls: length of the model's object list (-1: not given)
    rel_positions: Optional[Tensor] = None  # padded_positions(num_rel) when already computed
    value_ranges: Optional[dict] = None  # index field -> (min, max) [B] of each image's entries, when known
    value_flags: Optional[dict] = None  # float field -> [B] bool: an entry breaks its value rule, when known
    score_width: Optional[List[int]] = None  # score columns as given (-1: single-label scores)
    pred_masks: Optional[List[Tensor]] = None
    gt_masks: Optional[List[Tensor]] = None


def _full(lengths: Optional[List[int]], padded: Tensor) -> List[int]:
    """Per-image lengths of a padded field (``lengths`` None: every image has the padded width)."""
    if lengths is not None:
        return list(lengths)
    return [padded.shape[1]] * padded.shape[0] if padded.dim() > 1 else []


class _NotFast(Exception):
    """A batch the field-wise reader leaves to :func:`read_scene_graph` (which also names any bad field)."""


def _fast_padded(samples: Sequence[Any], mode: str, num_predicates: int,
                 device: Optional[torch.device], score_layout: str = 'auto') -> _Padded:
    """Read a batch of well-formed dict samples (what MMEngine's evaluator passes: ``DataSample.to_dict()``)
    field by field, without the per-sample reader; raises :class:`_NotFast` for anything else (other
    containers, single-label scores, shape or dtype surprises, mode mismatches, a background-last layout)."""
    widths = {'auto': (num_predicates, num_predicates + 1), 'background_first': (num_predicates + 1,),
              'no_background': (num_predicates,)}.get(score_layout)
    if widths is None:
        raise _NotFast
    lists, pred_inst = _field_lists(samples, mode)
    scores_list = lists.pop('scores')
    cache: dict = {}  # fields of equal lengths share their padded positions
    ranges = {}  # index field -> (min [B], max [B]) of each image's entries, where the compiled padding gave them
    checked = {}  # float field -> (padded, bad [B]) where the compiled padding read its value rule
    try:
        padded = {}
        for name, values in lists.items():
            if name == 'rel_pairs':
                padded[name], ranges[name] = _read_pairs(values, cache)
            elif name in _INDEX_FIELDS:
                padded[name], ranges[name] = _pad_index_field(name, values, cache)
            else:
                padded[name], checked[name] = _pad_float_field(name, values, cache)
    except (RuntimeError, TypeError, ValueError) as err:
        raise _NotFast from err
    rel_pairs, rel_lengths = padded['rel_pairs']
    num_rel = rel_lengths or [rel_pairs.width] * rel_pairs.batch_size
    score_shapes = _score_shapes(scores_list, num_rel, widths)
    if score_shapes is None or not _fits(padded):
        raise _NotFast
    score_width, in_place, one_device = score_shapes
    objects, model_objects = _padded_objects(mode, padded, pred_inst)
    sample_idx = [i if type(s) is dict and type(i := s.get('sample_idx')) is int and i >= 0 else sample_index(s)
                  for s in samples]  # (sample_index's common case inlined)
    fields = [padded['gt_boxes'][0].float(), padded['gt_labels'][0], padded['gt_pairs'][0],
              padded['gt_predicates'][0], objects.boxes.float(), objects.labels, objects.scores.float()]
    target = device or scores_list[0].device
    if any(f.device != target for f in fields):
        fields = [f.to(target) for f in fields]
    if not one_device or scores_list[0].device != target:
        scores_list = [t.to(target) for t in scores_list]
    rel_pairs = rel_pairs.to(target)
    gt_boxes, gt_labels, gt_pairs, gt_predicates, pred_boxes, pred_labels, pred_scores = fields
    flags = {name: bad for name, tensor in (('gt_boxes', gt_boxes), ('pred_boxes', pred_boxes),
                                            ('pred_scores', pred_scores))
             for read, bad in checked.values() if bad is not None and tensor is read}  # the tensors ruled on
    return _Padded(sample_idx=sample_idx, pred_boxes=pred_boxes, pred_labels=pred_labels,
                   pred_scores=pred_scores, gt_boxes=gt_boxes, gt_labels=gt_labels, gt_pairs=gt_pairs,
                   gt_predicates=gt_predicates, rel_pairs=rel_pairs, num_pred=objects.lengths,
                   num_gt=padded['gt_boxes'][1], num_gt_rel=padded['gt_pairs'][1], num_rel=num_rel,
                   raw_scores=scores_list if in_place else _float32_scores(scores_list),
                   background=[int(w == num_predicates + 1) for w in score_width],
                   single_label=[False] * len(num_rel), given_scores=[], model_objects=model_objects,
                   score_width=score_width,
                   rel_positions=cache.get(tuple(num_rel)) if rel_lengths else None, value_ranges=ranges,
                   value_flags=flags)


def _float32_scores(scores: List[Tensor]) -> List[Tensor]:
    """The score matrices as the kernels read them: float32 (half, bfloat16, float64 converted) and, on the CPU,
    C-contiguous (a strided view copied): :func:`~mmsgg_eval.functional.scores.float32_copies`."""
    return float32_copies(scores, [t.dtype != torch.float32 or not t.is_contiguous() for t in scores])


def _read_pairs(values: List[Any], cache: dict):
    """``((RelationPairs, lengths or None), (min [B], max [B]) or None)`` of the predicted pairs: contiguous int64
    CPU [R_b, 2] tensors are kept as they are, unread (no padded copy, :mod:`.pairs`; their value range comes from
    the pass that ranks them, :func:`_pair_index_range`); anything else is padded as the other index fields
    (:func:`_pad_index_field`), with its value range."""
    kernels = compiled.kernels()
    if kernels is not None and values and only_tensors(values) and values[0].dim() == 2 and values[0].shape[1] == 2:
        read = kernels.pad_int64_rows(values, 0, pad=False, ranges=False)  # (None for other dtypes or devices)
        if read is not None:
            lengths = read[3].tolist()
            lengths = None if lengths.count(max(lengths)) == len(lengths) else lengths
            return (RelationPairs(rows=values, lengths=lengths), lengths), None
    (padded, lengths), value_range = _pad_index_field('rel_pairs', values, cache)
    return (RelationPairs(padded=padded, lengths=lengths), lengths), value_range


def _pad_index_field(name: str, values: List[Any], cache: dict):
    """``(pad_with_lengths(values, pad value of name), (min [B], max [B]) of each image's entries or None)``:
    int64 CPU tensors (contiguous, or strided rows such as the columns of one [G, 3] array) are padded by one compiled
    call, which also gives their value range (for the index check, without another pass over the padded batch);
    anything else takes :func:`pad_with_lengths`."""
    kernels = compiled.kernels()
    padded = None
    if kernels is not None and values and only_tensors(values):  # (anything else: converted by the general path)
        padded = kernels.pad_int64_rows(values, _PAD_VALUES[name], strided=True)  # columns of one array too
    if padded is None:
        return pad_with_lengths(_all_detached(values), _PAD_VALUES[name], cache), None
    out, low, high, lengths = padded  # (int64 entries: none requires a gradient)
    lengths = lengths.tolist()
    width = out.shape[1]
    return (out, None if lengths.count(width) == len(lengths) else lengths), (low, high)


def _pad_float_field(name: str, values: List[Any], cache: dict):
    """``(pad_with_lengths(values, 0.0), bad [B] bool or None)`` of a box or score field: contiguous float32 CPU
    tensors are padded by one compiled call that also reads each image's value rule (:mod:`.validation`: boxes
    finite and xyxy, scores finite and >= 0; the rule then reads no entry again); anything else takes
    :func:`pad_with_lengths` (None: the rule reads the padded values)."""
    kernels = compiled.kernels()
    read = None
    if kernels is not None and values and only_tensors(values):  # (None for other dtypes, devices or layouts)
        read = kernels.pad_float_rows_checked(values, 1 if name.endswith('boxes') else 0)
    if read is None:
        return pad_with_lengths(_all_detached(values), _PAD_VALUES[name], cache), (None, None)
    out, bad, lengths = read  # (the entries' values copied: a gradient an entry requires is not carried)
    lengths = lengths.tolist()
    width = out.shape[1]
    return (out, None if lengths.count(width) == len(lengths) else lengths), (out, bad)


# the padding value of each field the field-wise reader pads
_PAD_VALUES = {'gt_boxes': 0.0, 'gt_labels': -1, 'gt_pairs': 0, 'gt_predicates': -1, 'rel_pairs': 0,
               'pred_labels': -1, 'pred_scores': 0.0, 'pred_boxes': 0.0}
# the integer index fields among them (padded with their value ranges by the compiled kernels)
_INDEX_FIELDS = ('gt_labels', 'gt_pairs', 'gt_predicates', 'rel_pairs', 'pred_labels')


def _field_lists(samples: Sequence[Any], mode: str) -> Tuple[dict, List[Any]]:
    """The per-image tensors of a batch of dict samples by field (:data:`_PAD_VALUES` names, and ``scores``: the
    score matrices; numpy arrays as tensors sharing their memory), with the samples' ``pred_instances``; raises
    :class:`_NotFast` for other containers, a missing field, SGCls samples with and without model boxes in one
    batch, or a ``pred_mode`` that lacks what ``mode`` reads."""
    try:
        gt_inst = [s['gt_instances'] for s in samples]
        gt_rel = [s['gt_relations'] for s in samples]
        pred_rel = [s['pred_relations'] for s in samples]
        produced = {s.get('pred_mode') for s in samples}
        lists = {'gt_boxes': [c['bboxes'] for c in gt_inst], 'gt_labels': [c['labels'] for c in gt_inst],
                 'gt_pairs': [c['pair_idxs'] for c in gt_rel], 'gt_predicates': [c['labels'] for c in gt_rel],
                 'rel_pairs': [c['pair_idxs'] for c in pred_rel], 'scores': [c['scores'] for c in pred_rel]}
        if mode == 'predcls':
            pred_inst = [s.get('pred_instances') for s in samples]
        else:
            pred_inst = [s['pred_instances'] for s in samples]
            lists['pred_labels'] = [c['labels'] for c in pred_inst]
            lists['pred_scores'] = [c['scores'] for c in pred_inst]
            with_boxes = [c.get('bboxes') is not None for c in pred_inst]
            if model_boxes_required(mode) or all(with_boxes):
                lists['pred_boxes'] = [c['bboxes'] for c in pred_inst]
            elif any(with_boxes):
                raise _NotFast  # SGCls with and without model boxes in one batch
    except (KeyError, TypeError, AttributeError) as err:
        raise _NotFast from err
    lists = {name: shared_tensors(values) for name, values in lists.items()}  # numpy arrays read in place
    lists['scores'] = _all_detached(lists['scores'])  # kept as given (the other fields: where they are padded)
    if any(_weaker(p, mode) for p in produced):
        raise _NotFast
    return lists, pred_inst


_REQUIRES_GRAD = operator.attrgetter('requires_grad')


def _all_detached(values: List[Any]) -> List[Any]:
    """``[detached(v) for v in values]`` (:func:`~.fields.detached`): ``values`` itself when no entry requires a
    gradient (the usual case, decided by one C-level pass over the entries)."""
    try:
        if not any(map(_REQUIRES_GRAD, values)):
            return values
    except AttributeError:  # entries that are not tensors (numpy arrays, lists)
        pass
    return [detached(v) for v in values]


def _score_shapes(scores_list: List[Any], num_rel: List[int], widths: Tuple[int, ...]):
    """``(score columns of each image, all C-contiguous float32, all on one device)`` when every score matrix is a
    2-D tensor of its image's pairs and an allowed width (``widths``; never 1), else None (the per-sample reader
    reads the batch and names what does not fit). One compiled call reads the matrices' metadata where the kernels
    are built, else one pass in Python."""
    if not only_tensors(scores_list):
        return None
    kernels = compiled.kernels()
    if kernels is not None:
        read = kernels.matrix_shapes(scores_list)
        if read is None:
            return None
        rows, given, float32, one_device = read
        allowed = set(widths) - {1}
        return (given, float32, one_device) if rows == list(num_rel) and set(given) <= allowed else None
    given, float32, device, one_device = [], True, None, True
    for t, rows in zip(scores_list, num_rel):
        if t.dim() != 2:
            return None
        count, width = t.shape
        if count != rows or width not in widths or width == 1:
            return None
        given.append(width)
        float32 = float32 and t.dtype == torch.float32 and t.is_contiguous()
        if device is None:
            device = t.device
        elif one_device and t.device != device:
            one_device = False
    return given, float32, one_device


def _fits(padded: dict) -> bool:
    """Whether the padded GT fields and predicted pairs (``padded``: field -> (tensor, lengths)) have the shapes,
    dtypes and counts of the data contract (else the per-sample reader reads the batch and names what does not
    fit; the score matrices: :func:`_score_shapes`)."""
    (gt_boxes, num_gt), (gt_labels, num_gt_labels) = padded['gt_boxes'], padded['gt_labels']
    (gt_pairs, num_gt_rel), (gt_predicates, num_gt_predicates) = padded['gt_pairs'], padded['gt_predicates']
    rel_pairs = padded['rel_pairs'][0]
    return (rel_pairs.well_formed() and gt_boxes.dim() == 3 and gt_boxes.shape[2] == 4 and gt_labels.dim() == 2
            and gt_pairs.dim() == 3 and gt_pairs.shape[2] == 2 and gt_predicates.dim() == 2
            and not (gt_labels.is_floating_point() or gt_pairs.is_floating_point() or gt_predicates.is_floating_point())
            and num_gt_labels == num_gt and gt_labels.shape[1] == gt_boxes.shape[1]
            and num_gt_predicates == num_gt_rel and gt_predicates.shape[1] == gt_pairs.shape[1])


def _padded_objects(mode: str, padded: dict, pred_inst: List[Any]) -> Tuple[ObjectList, List[int]]:
    """:func:`evaluated_objects` of a padded batch (``padded``: field -> (tensor, lengths)); raises
    :class:`_NotFast` when the model's boxes, labels or scores do not fit the boxes they are on."""
    gt = ObjectList(padded['gt_boxes'][0], padded['gt_labels'][0], lengths=padded['gt_boxes'][1])
    if mode == 'predcls':
        listed = [getattr(get_field(p, 'bboxes'), 'shape', (0,))[0] for p in pred_inst]
        return evaluated_objects(mode, gt, None, listed)
    boxes, num_boxes = padded.get('pred_boxes', (None, None))
    if boxes is not None and (boxes.dim() != 3 or boxes.shape[2] != 4):
        raise _NotFast
    (labels, num_labels), (scores, num_scores) = padded['pred_labels'], padded['pred_scores']
    objects, compared = evaluated_objects(mode, gt, ObjectList(boxes, labels, scores, num_boxes), ())
    width = objects.boxes.shape[1]
    if (labels.dim() != 2 or labels.is_floating_point() or scores.dim() != 2 or labels.shape[1] != width
            or scores.shape[1] != width or num_labels != objects.lengths or num_scores != objects.lengths):
        raise _NotFast
    return objects, compared


def _padded_from_items(items: List[dict], with_masks: bool, device: torch.device) -> _Padded:
    """Pad the per-sample dicts of :func:`read_scene_graph`."""
    if any(it['rel_scores'].device != device or it['gt_boxes'].device != device for it in items):
        items = [{k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in it.items()} for it in items]

    def column(name: str, value: float) -> Tensor:
        return _pad([it[name] for it in items], value) if items else torch.zeros(0, device=device)

    return _Padded(
        sample_idx=[it['sample_idx'] for it in items],
        pred_boxes=column('pred_boxes', 0.0), pred_labels=column('pred_labels', -1),
        pred_scores=column('pred_scores', 0.0), gt_boxes=column('gt_boxes', 0.0), gt_labels=column('gt_labels', -1),
        gt_pairs=column('gt_pairs', 0), gt_predicates=column('gt_predicates', -1),
        rel_pairs=RelationPairs(padded=column('rel_pairs', 0)),
        num_pred=[it['pred_boxes'].shape[0] for it in items], num_gt=[it['gt_boxes'].shape[0] for it in items],
        num_gt_rel=[it['gt_predicates'].shape[0] for it in items],
        num_rel=[it['rel_pairs'].shape[0] for it in items], raw_scores=[it['rel_scores'] for it in items],
        background=[it['background'] for it in items], single_label=[it['single_label'] for it in items],
        given_scores=[it['given_scores'] for it in items if it['single_label']],
        model_objects=[it['model_objects'] for it in items], score_width=[it['score_width'] for it in items],
        pred_masks=[it['pred_masks'] for it in items] if with_masks else None,
        gt_masks=[it['gt_masks'] for it in items] if with_masks else None)
