"""Reading a batch of scene-graph data samples into one validated :class:`SceneGraphBatch`.

Metrics receive MMEngine data samples (``DetDataSample`` or their ``to_dict()`` form, or plain dicts of
numpy arrays in offline evaluation). Two readers build the same padded tensors:

* the field-wise reader takes well-formed dict batches (what MMEngine's evaluator passes) field by field;
* the per-sample reader (:func:`read_scene_graph`) takes anything else, and explains every structural
  problem (a missing field, a wrong shape, a count that does not fit) naming the sample and the field.

The value rules (finite boxes, integer indices in range, non-negative finite scores, see
:mod:`.validation`) then run once on the padded batch, whichever reader built it.

Objects per mode (the legacy Scene-Graph-Benchmark evaluator's rule):

* PredCls: the GT boxes and GT labels with object scores 1 replace the model's objects; the predicted pair
  indices keep pointing where they pointed (into the model's object list, which the legacy code assumes is
  the GT list in the same order);
* SGCls: the MODEL's objects (``pred_instances.bboxes`` with its labels and scores: in the legacy code the
  GT boxes after the model's resize round trip, so IoU with the GT may be just below 1); the GT boxes with
  the predicted labels only when the model gives no boxes;
* SGDet / PhrDet: everything predicted.

When the model's object list has another length than the GT (real legacy runs drop a GT box on the last
pixel column from the proposals), PredCls and SGCls evaluate the image as the legacy code does and the image
is counted in :class:`ObjectCounts` (one warning per evaluation); ``ObjectCounts(strict=True)`` refuses it.
A pair index at or past the end of the list that is evaluated (PredCls: the GT list; SGCls / SGDet: the
model's list) is a ValueError naming the sample: the legacy numpy indexing raises IndexError there.
"""
import functools
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional import compiled
from ..functional.scores import (RelationScores, ScoreWorkspace, build_relation_scores, lengths_mask, pad_rows,
                                 padded_positions, scatters)
from .fields import get_field, member, optional, sample_index, sample_name, to_tensor
from .validation import FieldRule, box_shape, check_tensor, validate_padded

MODES = ('predcls', 'sgcls', 'sgdet', 'phrdet')
#: How the columns of a [R, C] ``pred_relations.scores`` matrix are read (P = number of predicates):
#: 'auto': C = P + 1 -> column 0 is "no relation"; C = P -> no background column;
#: 'background_first': C must be P + 1, column 0 = no relation; 'background_last': C must be P + 1, column P =
#: no relation; 'no_background': C must be P. 1-D scores with ``pred_relations.labels`` are read alike by all.
SCORE_LAYOUTS = ('auto', 'background_first', 'background_last', 'no_background')
# what each mode needs predicted: PredCls nothing, SGCls labels/scores, SGDet/PhrDet boxes too
_STRENGTH = {'predcls': 0, 'sgcls': 1, 'sgdet': 2, 'phrdet': 2}

# Up to this many score rows a batch is stacked / concatenated once (one copy of its score matrices, read by
# whole-batch kernels); above, each image's matrix stays a view. On the CPU images with more than
# VIEW_ROWS_PER_IMAGE rows on average (SGDet with all pairs) also stay views: per-image kernels are then long
# enough to amortise their dispatch, and copying the matrices would cost more than it saves. On a GPU
# whole-batch kernels win up to memory limits.
SMALL_BATCH_ROWS = 1 << 18  # ~53 MB of 51-column float32 scores (the pool capacity of the metrics)
VIEW_ROWS_PER_IMAGE = 2048
SMALL_BATCH_ROWS_GPU = 1 << 22  # ~850 MB of 51-column float32 scores

# how many sample names the object-count warning lists
_SHOWN_SAMPLES = 5


class ObjectCounts:
    """Images whose predicted object list is shorter or longer than the GT (PredCls / SGCls).

    The legacy evaluator evaluates them (it only prints "Num of GT boxes is not matching with num of pred
    boxes in SGCLS"); so do the metrics by default, collecting them here for one warning per evaluation
    (:meth:`warn`). ``strict=True`` refuses the first such image with a ValueError naming it.
    """

    def __init__(self, strict: bool = False) -> None:
        self.strict = bool(strict)
        self.count = 0
        self.examples: List[str] = []

    def add(self, mode: str, sample: Any, model_count: int, gt_count: int) -> None:
        field = 'pred_instances.bboxes' if get_field(get_field(sample, 'pred_instances'), 'bboxes') is not None \
            else 'pred_instances.labels'
        if self.strict:
            raise ValueError(
                f'{sample_name(sample)}: {mode} expects the model\'s objects (`{field}`) on the {gt_count} GT '
                f'boxes, got {model_count}; strict_counts=True refuses such images (by default they are '
                f'evaluated as the legacy evaluator does, with a warning)')
        self.count += 1
        if len(self.examples) < _SHOWN_SAMPLES:
            self.examples.append(sample_name(sample))

    def message(self, mode: str) -> Optional[str]:
        """The warning text, or None when every image had as many predicted objects as GT boxes."""
        if not self.count:
            return None
        more = ', ...' if self.count > len(self.examples) else ''
        rule = ("the GT boxes and labels at the model's pair indices" if mode == 'predcls' else
                "the model's boxes, labels and pair indices")
        return (f'{self.count} image(s) in {mode} have a predicted object list of another length than the GT '
                f'(first: {", ".join(self.examples)}{more}); evaluated as the legacy evaluator does ({rule}); '
                f'pass strict_counts=True to refuse them')

    def warn(self, mode: str) -> None:
        """Log the collected images once (MMEngine's current logger when available) and start over."""
        text = self.message(mode)
        self.count, self.examples = 0, []
        if text is None:
            return
        try:
            import logging
            from mmengine.logging import print_log
            print_log(text, logger='current', level=logging.WARNING)
        except ImportError:  # pragma: no cover - mmengine is a dependency of the metrics
            import warnings
            warnings.warn(text)


@dataclass
class SceneGraphBatch:
    """A batch of B scene-graph samples, ready for the functional layer.

    Objects: N predicted / M GT per image (padded). Relations: R predicted pairs, G GT relations (padded).
    ``scores`` holds the predicate scores (:class:`~mmsgg_eval.functional.scores.RelationScores`, in the
    layout chosen for the batch size). All labels are 0-based; boxes are xyxy in the original image frame
    (float32).
    """
    sample_idx: Tensor          # [B] int64 (-1: the sample has none)
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
    scores: RelationScores
    pred_masks: Optional[List[Tensor]] = None
    gt_masks: Optional[List[Tensor]] = None
    score_width: Optional[List[int]] = None  # score columns each sample gave (-1: single-label scores)

    @property
    def device(self) -> torch.device:
        return self.rel_valid.device

    @property
    def num_predicates(self) -> int:
        return self.scores.num_predicates

    @property
    def gc_prob(self) -> Tensor:
        """[B, R] best non-background score of each pair (0 padding)."""
        return self.scores.best

    def gc_predicate_at(self, order: Tensor, valid: Tensor) -> Tensor:
        """Graph-constrained predicate (first maximal column) of pairs ``order`` [B, K]; invalid entries 0."""
        return self.scores.predicate_at(order, valid)


def _pad(tensors: Sequence[Any], value: float) -> Tensor:
    """[B, L, ...] batch of tensors [L_b, ...]: one stacked copy when every L_b is equal (fixed-size outputs),
    else padded with ``value``. Mixed dtypes are promoted first (a float field among integer ones keeps its
    fractions for the validation); mmdet boxes objects are taken by their tensors; irregular trailing shapes
    or devices raise (RuntimeError / ValueError)."""
    return _pad_with_lengths(tensors, value)[0]


def _pad_with_lengths(tensors: Sequence[Any], value: float, positions: Optional[dict] = None):
    """:func:`_pad` and the per-image lengths L_b (None when they are all equal: no padding). ``positions``
    caches :func:`~mmsgg_eval.functional.scores.padded_positions` by lengths, for fields of equal lengths."""
    tensors = [t if type(t) is Tensor else to_tensor(t) for t in tensors]
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        common = functools.reduce(torch.promote_types, dtypes)
        tensors = [t.to(common) for t in tensors]
    shapes = [t.shape for t in tensors]
    if any(not shape for shape in shapes):
        raise TypeError('a 0-d value has no entries')
    lengths = [shape[0] for shape in shapes]
    width = max(lengths, default=0)
    if lengths.count(width) == len(lengths):  # no padding (pad_rows stacks them)
        return pad_rows(tensors, value, lengths), None
    where = None
    if positions is not None and scatters(lengths):
        key = tuple(lengths)
        where = positions.get(key)
        if where is None or where.device != tensors[0].device:
            where = positions[key] = padded_positions(lengths, width, tensors[0].device)
    return pad_rows(tensors, value, lengths, where), lengths


def _entries(values: Tensor, count: int, sample: Any, field: str, reason: str = '') -> Tensor:
    values = values.reshape(-1)
    if values.numel() != count:
        raise ValueError(f'{sample_name(sample)}: `{field}` has {values.numel()} entries, expected {count}{reason}')
    return values


def _pairs(pairs: Tensor, sample: Any, field: str) -> Tensor:
    if pairs.numel() == 0:
        return pairs.reshape(0, 2)
    if pairs.dim() != 2 or pairs.shape[1] != 2:
        raise ValueError(f'{sample_name(sample)}: `{field}` must have shape [R, 2], got {list(pairs.shape)}')
    return pairs


def _check_produced_mode(sample: Any, produced: Any, mode: str) -> None:
    if produced in _STRENGTH and _STRENGTH[produced] < _STRENGTH[mode]:
        raise ValueError(f'{sample_name(sample)}: the model produced {produced} predictions (metainfo '
                         f'`pred_mode`), but the metric evaluates {mode!r}: {mode} needs predicted '
                         f'{"boxes, labels and scores" if mode in ("sgdet", "phrdet") else "labels and scores"} '
                         f'in `pred_instances`; set the metric mode to {produced!r} or use a model that predicts '
                         f'them')


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
    if get_field(sample, 'pred_relations') is None:
        raise ValueError(f'{sample_name(sample)}: missing field `pred_relations` (the model must output '
                         f'pred_relations.pair_idxs and pred_relations.scores)')
    _check_produced_mode(sample, get_field(sample, 'pred_mode'), mode)
    gt_instances, gt_relations = get_field(sample, 'gt_instances'), get_field(sample, 'gt_relations')
    pred_instances, pred_relations = get_field(sample, 'pred_instances'), get_field(sample, 'pred_relations')
    rel_scores = member(pred_relations, 'scores', sample, 'pred_relations.scores', device)
    device = rel_scores.device
    gt_boxes = box_shape(member(gt_instances, 'bboxes', sample, 'gt_instances.bboxes', device), sample,
                      'gt_instances.bboxes')
    num_gt_objects = gt_boxes.shape[0]
    gt_labels = _entries(member(gt_instances, 'labels', sample, 'gt_instances.labels', device), num_gt_objects,
                         sample, 'gt_instances.labels')
    gt_pairs = _pairs(member(gt_relations, 'pair_idxs', sample, 'gt_relations.pair_idxs', device), sample,
                      'gt_relations.pair_idxs')
    gt_predicates = _entries(member(gt_relations, 'labels', sample, 'gt_relations.labels', device),
                             gt_pairs.shape[0], sample, 'gt_relations.labels')

    model_objects = -1
    if mode == 'predcls':
        listed = optional(sample, 'pred_instances.bboxes', device)
        if listed is not None and listed.shape[0]:
            model_objects = listed.shape[0]
        pred_boxes, pred_labels = gt_boxes, gt_labels
        pred_scores = torch.ones(num_gt_objects, device=device)
    else:
        if pred_instances is None:
            raise ValueError(f'{sample_name(sample)}: mode {mode!r} needs `pred_instances` '
                             f'(labels and scores{", boxes" if mode in ("sgdet", "phrdet") else ""})')
        given_boxes = get_field(pred_instances, 'bboxes')
        reason = ''
        if mode == 'sgcls' and given_boxes is None:
            pred_boxes = gt_boxes  # no boxes from the model: its labels are on the GT boxes
            reason = ' (one per GT box: `pred_instances` has no `bboxes`)'
        else:
            pred_boxes = box_shape(member(pred_instances, 'bboxes', sample, 'pred_instances.bboxes', device), sample,
                                'pred_instances.bboxes')
            if mode == 'sgcls':
                model_objects = pred_boxes.shape[0]
        count = pred_boxes.shape[0]
        pred_labels = _entries(member(pred_instances, 'labels', sample, 'pred_instances.labels', device), count,
                               sample, 'pred_instances.labels', reason)
        pred_scores = _entries(member(pred_instances, 'scores', sample, 'pred_instances.scores', device), count,
                               sample, 'pred_instances.scores', reason).float()
    rel_pairs = _pairs(member(pred_relations, 'pair_idxs', sample, 'pred_relations.pair_idxs', device), sample,
                       'pred_relations.pair_idxs')
    num_rel = rel_pairs.shape[0]
    rel_scores = rel_scores.float()
    single_label = rel_scores.dim() == 1 or (rel_scores.dim() == 2 and rel_scores.shape[1] == 1
                                             and optional(sample, 'pred_relations.labels') is not None)
    given_scores = None
    score_width = -1 if single_label else (rel_scores.shape[1] if rel_scores.dim() == 2 else 0)
    background = 0
    if single_label:
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
        given_scores = rel_scores.reshape(-1)
        dense[torch.arange(num_rel, device=device), labels.long()] = given_scores
        rel_scores = dense
    elif rel_scores.dim() != 2 or rel_scores.shape[0] != num_rel:
        raise ValueError(
            f'{sample_name(sample)}: `pred_relations.scores` has shape {list(rel_scores.shape)}; expected '
            f'[{num_rel}, {num_predicates + 1}] (column 0 = no relation) or [{num_rel}, {num_predicates}] '
            f'for {num_predicates} predicates, or [{num_rel}] with `pred_relations.labels`')
    else:
        rel_scores, background = score_columns(rel_scores, num_predicates, score_layout, sample)
    out = dict(sample_idx=sample_index(sample), pred_boxes=pred_boxes, pred_labels=pred_labels,
               pred_scores=pred_scores, gt_boxes=gt_boxes, gt_labels=gt_labels, gt_pairs=gt_pairs,
               gt_predicates=gt_predicates, rel_pairs=rel_pairs, rel_scores=rel_scores, single_label=single_label,
               given_scores=given_scores, background=background, model_objects=model_objects,
               score_width=score_width)
    if with_masks:
        gt_masks = _require_masks(sample, 'gt_instances.masks', device)
        if mode in ('sgdet', 'phrdet'):
            pred_masks = _require_masks(sample, 'pred_instances.masks', device)
            if pred_masks.shape[0] != pred_boxes.shape[0]:
                raise ValueError(f'{sample_name(sample)}: `pred_instances.masks` has {pred_masks.shape[0]} '
                                 f'masks for {pred_boxes.shape[0]} boxes')
        else:
            pred_masks = gt_masks
        if gt_masks.shape[0] != num_gt_objects:
            raise ValueError(f'{sample_name(sample)}: `gt_instances.masks` has {gt_masks.shape[0]} masks for '
                             f'{num_gt_objects} boxes')
        out.update(gt_masks=gt_masks, pred_masks=pred_masks)
    return out


def _require_masks(sample: Any, path: str, device: Optional[torch.device]) -> Tensor:
    """Bool masks at ``path`` for mask matching; a missing field says to use box matching instead."""
    masks = optional(sample, path, device)
    if masks is None:
        raise ValueError(f'{sample_name(sample)}: missing field `{path}`: match=\'mask\' (the default of '
                         f'protocol=\'openpsg\') compares segmentation masks; for box-only data use '
                         f'match=\'box\' (e.g. SGRecall(protocol=\'openpsg\', match=\'box\'), offline: '
                         f'--metric-options match=box)')
    return masks.bool()


def _valid_mask(lengths: Optional[List[int]], batch: int, width: int, device: torch.device) -> Tensor:
    """[B, width] True on real entries; ``lengths`` None = every image has ``width`` entries."""
    if lengths is None:
        return torch.ones((batch, width), dtype=torch.bool, device=device)
    return lengths_mask(lengths, width, device)


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
    rel_pairs: Tensor
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
    pred_boxes_list = None
    try:
        gt_inst = [s['gt_instances'] for s in samples]
        gt_rel = [s['gt_relations'] for s in samples]
        pred_rel = [s['pred_relations'] for s in samples]
        produced = {s.get('pred_mode') for s in samples}
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
            with_boxes = [c.get('bboxes') is not None for c in pred_inst]
            if mode in ('sgdet', 'phrdet') or all(with_boxes):
                pred_boxes_list = [c['bboxes'] for c in pred_inst]
            elif any(with_boxes):
                raise _NotFast  # SGCls with and without model boxes in one batch
        else:
            pred_inst = [s.get('pred_instances') for s in samples]
    except (KeyError, TypeError, AttributeError) as err:
        raise _NotFast from err
    if any(p in _STRENGTH and _STRENGTH[p] < _STRENGTH[mode] for p in produced):
        raise _NotFast
    try:
        cache: dict = {}  # fields of equal lengths share their padded positions
        gt_boxes, num_gt = _pad_with_lengths(gt_boxes_list, 0.0, cache)
        gt_labels, num_gt_labels = _pad_with_lengths(gt_labels_list, -1, cache)
        gt_pairs, num_gt_rel = _pad_with_lengths(gt_pairs_list, 0, cache)
        gt_predicates, num_gt_predicates = _pad_with_lengths(gt_pred_list, -1, cache)
        rel_pairs, rel_lengths = _pad_with_lengths(rel_pairs_list, 0, cache)
        if mode != 'predcls':
            pred_labels, num_pred_labels = _pad_with_lengths(pred_labels_list, -1, cache)
            pred_scores, num_pred_scores = _pad_with_lengths(pred_scores_list, 0.0, cache)
        if pred_boxes_list is not None:
            pred_boxes, num_pred_boxes = _pad_with_lengths(pred_boxes_list, 0.0, cache)
    except (RuntimeError, TypeError, ValueError) as err:
        raise _NotFast from err
    num_rel = rel_lengths or [rel_pairs.shape[1]] * rel_pairs.shape[0]
    ok = (gt_boxes.dim() == 3 and gt_boxes.shape[2] == 4 and gt_labels.dim() == 2 and gt_pairs.dim() == 3
          and gt_pairs.shape[2] == 2 and gt_predicates.dim() == 2 and rel_pairs.dim() == 3 and rel_pairs.shape[2] == 2
          and not (gt_labels.is_floating_point() or gt_pairs.is_floating_point()
                   or gt_predicates.is_floating_point() or rel_pairs.is_floating_point())
          and num_gt_labels == num_gt and gt_labels.shape[1] == gt_boxes.shape[1]
          and num_gt_predicates == num_gt_rel and gt_predicates.shape[1] == gt_pairs.shape[1]
          and all(type(t) is Tensor and t.dim() == 2 and t.shape[0] == r and t.shape[1] in widths
                  and t.shape[1] != 1 for t, r in zip(scores_list, num_rel)))
    if not ok:
        raise _NotFast
    batch = gt_boxes.shape[0]
    model_objects = [-1] * batch
    if mode == 'predcls':
        counts = [getattr(get_field(p, 'bboxes'), 'shape', (0,))[0] for p in pred_inst]
        model_objects = [c if c else -1 for c in counts]
        pred_boxes, pred_labels, num_pred = gt_boxes, gt_labels, num_gt
        pred_scores = _valid_mask(num_gt, batch, gt_boxes.shape[1], gt_boxes.device).float()
    else:
        if pred_boxes_list is None:  # SGCls without model boxes: its labels are on the GT boxes
            pred_boxes, num_pred = gt_boxes, num_gt
        else:
            if pred_boxes.dim() != 3 or pred_boxes.shape[2] != 4:
                raise _NotFast
            num_pred = num_pred_boxes
            if mode == 'sgcls':
                model_objects = num_pred or [pred_boxes.shape[1]] * batch
        if (pred_labels.dim() != 2 or pred_labels.is_floating_point() or pred_scores.dim() != 2
                or pred_labels.shape[1] != pred_boxes.shape[1] or pred_scores.shape[1] != pred_boxes.shape[1]
                or num_pred_labels != num_pred or num_pred_scores != num_pred):
            raise _NotFast
    sample_idx = [sample_index(s) for s in samples]
    fields = [gt_boxes.float(), gt_labels, gt_pairs, gt_predicates, rel_pairs, pred_boxes.float(), pred_labels,
              pred_scores.float()]
    target = device or scores_list[0].device
    if any(f.device != target for f in fields):
        fields = [f.to(target) for f in fields]
    if any(t.device != target for t in scores_list):
        scores_list = [t.to(target) for t in scores_list]
    gt_boxes, gt_labels, gt_pairs, gt_predicates, rel_pairs, pred_boxes, pred_labels, pred_scores = fields
    return _Padded(sample_idx=sample_idx, pred_boxes=pred_boxes, pred_labels=pred_labels,
                   pred_scores=pred_scores, gt_boxes=gt_boxes, gt_labels=gt_labels, gt_pairs=gt_pairs,
                   gt_predicates=gt_predicates, rel_pairs=rel_pairs, num_pred=num_pred, num_gt=num_gt,
                   num_gt_rel=num_gt_rel, num_rel=num_rel,
                   raw_scores=[t if t.dtype == torch.float32 else t.float() for t in scores_list],
                   background=[int(t.shape[1] == num_predicates + 1) for t in scores_list],
                   single_label=[False] * batch, given_scores=[], model_objects=model_objects,
                   score_width=[t.shape[1] for t in scores_list], rel_positions=cache.get(tuple(num_rel)) if rel_lengths else None)


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
        gt_pairs=column('gt_pairs', 0), gt_predicates=column('gt_predicates', -1), rel_pairs=column('rel_pairs', 0),
        num_pred=[it['pred_boxes'].shape[0] for it in items], num_gt=[it['gt_boxes'].shape[0] for it in items],
        num_gt_rel=[it['gt_predicates'].shape[0] for it in items],
        num_rel=[it['rel_pairs'].shape[0] for it in items], raw_scores=[it['rel_scores'] for it in items],
        background=[it['background'] for it in items], single_label=[it['single_label'] for it in items],
        given_scores=[it['given_scores'] for it in items if it['single_label']],
        model_objects=[it['model_objects'] for it in items], score_width=[it['score_width'] for it in items],
        pred_masks=[it['pred_masks'] for it in items] if with_masks else None,
        gt_masks=[it['gt_masks'] for it in items] if with_masks else None)


def _check_sample_ids(samples: Sequence[Any], ids: List[Optional[int]]) -> None:
    """A ``sample_idx`` may appear once per batch (the metrics remove sampler repeats before reading)."""
    seen = {}
    for pos, idx in enumerate(ids):
        if idx is None:
            continue
        if idx in seen:
            raise ValueError(f'{sample_name(samples[pos])}: `sample_idx` {idx} appears twice in one batch (also '
                             f'{sample_name(samples[seen[idx]])}); each dataset sample must be read once')
        seen[idx] = pos


def _validate(samples: Sequence[Any], p: _Padded, mode: str, num_classes: int, num_predicates: int,
              scores: RelationScores) -> None:
    """Every value rule of the data contract on the padded batch (see :mod:`.validation`)."""
    num_pred, num_gt = _full(p.num_pred, p.pred_boxes), _full(p.num_gt, p.gt_boxes)

    def pair_note(b: int) -> str:
        if mode == 'predcls':
            listed = p.model_objects[b]
            model = f'; the model listed {listed}' if listed >= 0 else ''
            return (f'(PredCls evaluates the GT objects at the model\'s pair indices{model}; the legacy '
                    f'evaluator raises IndexError for such a pair)')
        if mode == 'sgcls':
            return '(SGCls evaluates the model\'s objects, `pred_instances`)'
        return ''

    rules = [FieldRule('gt_instances.bboxes', 'boxes', p.gt_boxes, p.num_gt)]
    if mode != 'predcls':  # (SGCls without model boxes: the GT boxes again, checked above first)
        rules.append(FieldRule('pred_instances.bboxes', 'boxes', p.pred_boxes, p.num_pred))
    rules.append(FieldRule('gt_instances.labels', 'index', p.gt_labels, p.num_gt, num_classes, 'class'))
    rules.append(FieldRule('gt_relations.pair_idxs', 'index', p.gt_pairs, p.num_gt_rel, num_gt, 'object',
                           zero_padded=True))
    rules.append(FieldRule('gt_relations.labels', 'index', p.gt_predicates, p.num_gt_rel, num_predicates,
                           'predicate'))
    if mode != 'predcls':
        rules.append(FieldRule('pred_instances.labels', 'index', p.pred_labels, p.num_pred, num_classes, 'class'))
        rules.append(FieldRule('pred_instances.scores', 'score', p.pred_scores, p.num_pred))
    rules.append(FieldRule('pred_relations.pair_idxs', 'index', p.rel_pairs, p.num_rel, num_pred, 'object',
                           pair_note, zero_padded=True))

    def score_message(b: int) -> str:
        raw = p.given_scores[sum(p.single_label[:b])] if p.single_label[b] else p.raw_scores[b]
        bad = ~(torch.isfinite(raw) & (raw >= 0))
        where = bad.nonzero()[0].tolist()
        value = float(raw[tuple(where)])
        what = 'NaN or inf' if value != value or abs(value) == float('inf') else 'a negative value'
        return (f'{sample_name(samples[b])}: `pred_relations.scores`{where} = {value} is {what}; scores must be '
                f'finite and >= 0 (probabilities, e.g. softmax outputs, not logits)')

    validate_padded(rules, samples, [scores.bad_images], [score_message])


def _score_layout(padded: _Padded, num_predicates: int, device: torch.device) -> str:
    """'compiled' where the compiled CPU kernels can read the matrices in place (any size: no copy), else
    'stacked' (concatenated when the images differ) for batches up to the size limits above, else 'views'."""
    if compiled.suits(padded.raw_scores, padded.background, padded.single_label, num_predicates, device):
        return 'compiled'
    num_rel = padded.num_rel
    total = sum(num_rel)
    if device.type == 'cpu':
        small = total <= SMALL_BATCH_ROWS and total <= VIEW_ROWS_PER_IMAGE * max(len(num_rel), 1)
    else:
        small = total <= SMALL_BATCH_ROWS_GPU
    return 'stacked' if small else 'views'


def collate_scene_graphs(samples: Sequence[Any], mode: str, num_classes: int, num_predicates: int,
                         with_masks: bool = False, device: Optional[torch.device] = None,
                         counts: Optional[ObjectCounts] = None,
                         workspace: Optional[ScoreWorkspace] = None, score_layout: str = 'auto') -> SceneGraphBatch:
    """Read a list of samples and pad them into one validated :class:`SceneGraphBatch`.

    Well-formed dict samples are read field by field; anything else goes through :func:`read_scene_graph`.
    The value rules run once on the padded batch (the same on both paths and for any batch size). Images
    whose predicted object list does not have the GT's length (PredCls / SGCls) are added to ``counts``
    (the caller warns once per evaluation); without ``counts`` this call warns itself. ``workspace``: where
    the copy of the score matrices goes (:class:`~mmsgg_eval.functional.scores.ScoreWorkspace`: the batch
    returned then lives in it until the workspace's next batch). ``score_layout``: how score columns are read
    (:data:`SCORE_LAYOUTS`).
    """
    if mode not in MODES:
        raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
    if score_layout not in SCORE_LAYOUTS:
        raise ValueError(f'score_layout must be one of {SCORE_LAYOUTS}, got {score_layout!r}')
    padded = None
    if samples and not with_masks:
        try:
            padded = _fast_padded(samples, mode, num_predicates, device, score_layout)
        except _NotFast:
            padded = None
    if padded is None:
        items = [read_scene_graph(s, mode, num_classes, num_predicates, with_masks, device, score_layout)
                 for s in samples]
        device = items[0]['rel_pairs'].device if items else (device or torch.device('cpu'))
        padded = _padded_from_items(items, with_masks, device)
    device = padded.gt_boxes.device
    _check_sample_ids(samples, padded.sample_idx)
    batch_size = len(padded.num_rel)
    num_rel = padded.num_rel
    max_rel = max(num_rel) if num_rel else 0
    scores = build_relation_scores(padded.raw_scores, padded.background, num_rel, num_predicates,
                                   padded.single_label, padded.given_scores,
                                   _score_layout(padded, num_predicates, device),
                                   device=device, positions=padded.rel_positions, workspace=workspace)
    _validate(samples, padded, mode, num_classes, num_predicates, scores)
    report = counts if counts is not None else ObjectCounts()
    for sample, listed, gt in zip(samples, padded.model_objects, _full(padded.num_gt, padded.gt_boxes)):
        if listed >= 0 and listed != gt:
            report.add(mode, sample, listed, gt)
    if counts is None:
        report.warn(mode)
    sample_idx = torch.tensor([-1 if i is None else i for i in padded.sample_idx], dtype=torch.long, device=device)
    num_rel_t = torch.tensor(num_rel, dtype=torch.long, device=device)
    return SceneGraphBatch(
        sample_idx=sample_idx, pred_boxes=padded.pred_boxes, pred_labels=padded.pred_labels.long(),
        pred_scores=padded.pred_scores, gt_boxes=padded.gt_boxes, gt_labels=padded.gt_labels.long(),
        gt_pairs=padded.gt_pairs.long(), gt_predicates=padded.gt_predicates.long(),
        gt_valid=_valid_mask(padded.num_gt_rel, batch_size, padded.gt_predicates.shape[1] if batch_size else 0,
                             device),
        rel_pairs=padded.rel_pairs.long(),
        rel_valid=_valid_mask(None if max_rel and all(r == max_rel for r in num_rel) else num_rel, batch_size,
                              max_rel, device),
        num_rel_preds=num_rel_t, scores=scores, pred_masks=padded.pred_masks, gt_masks=padded.gt_masks,
        score_width=padded.score_width)
