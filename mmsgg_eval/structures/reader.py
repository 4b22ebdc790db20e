"""Reading a batch of scene-graph data samples into one validated :class:`SceneGraphBatch`.

Metrics receive MMEngine data samples (``DetDataSample`` or their ``to_dict()`` form, or plain dicts of
numpy arrays in offline evaluation). Two readers build the same padded tensors:

* the field-wise reader takes well-formed dict batches (what MMEngine's evaluator passes) field by field;
* the per-sample reader (:func:`read_scene_graph`) takes anything else, and explains every structural
  problem (a missing field, a wrong shape, a count that does not fit) naming the sample and the field.

The value rules (finite boxes, integer indices in range, non-negative finite scores, see
:mod:`.validation`) then run once on the padded batch, whichever reader built it. The layout of the score
matrices is chosen by :func:`~mmsgg_eval.functional.scores.choose_layout`.

Objects per mode (the legacy Scene-Graph-Benchmark evaluator's rule, decided for both readers by
:func:`evaluated_objects`):

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
from ..functional.ranking import RankedLists, compiled_ranked_lists
from ..functional.transfer import host_tensor
from ..functional.scores import (RelationScores, ScoreWorkspace, build_relation_scores, choose_layout, lengths_mask,
                                 pad_rows, padded_positions, scatters)
from .fields import detached, get_field, member, optional, sample_index, sample_name, to_tensor
from .pairs import RelationPairs
from .validation import FieldRule, box_shape, check_tensor, validate_padded

MODES = ('predcls', 'sgcls', 'sgdet', 'phrdet')
#: How the columns of a [R, C] ``pred_relations.scores`` matrix are read (P = number of predicates):
#: 'auto': C = P + 1 -> column 0 is "no relation"; C = P -> no background column;
#: 'background_first': C must be P + 1, column 0 = no relation; 'background_last': C must be P + 1, column P =
#: no relation; 'no_background': C must be P. 1-D scores with ``pred_relations.labels`` are read alike by all.
SCORE_LAYOUTS = ('auto', 'background_first', 'background_last', 'no_background')
# what each mode needs predicted: PredCls nothing, SGCls labels/scores, SGDet/PhrDet boxes too
_STRENGTH = {'predcls': 0, 'sgcls': 1, 'sgdet': 2, 'phrdet': 2}

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
    pairs: RelationPairs        # the predicted pairs (``rel_pairs`` [B, R, 2] padded on first use)
    rel_valid: Tensor           # [B, R] bool
    num_rel_preds: Tensor       # [B] int64
    scores: RelationScores
    pred_masks: Optional[List[Tensor]] = None
    gt_masks: Optional[List[Tensor]] = None
    score_width: Optional[List[int]] = None  # score columns each sample gave (-1: single-label scores)
    ranked_lists: Optional[RankedLists] = None  # both ranked lists, when built while the scores were read
    gt_counts: Optional[List[int]] = None  # GT relations of each image (host ints: sizes known without a sync)
    ids_missing: bool = False  # some sample has no ``sample_idx`` (-1 in ``sample_idx``; known on the host)

    @property
    def device(self) -> torch.device:
        return self.rel_valid.device

    @property
    def rel_pairs(self) -> Tensor:
        """[B, R, 2] int64 predicted (subject, object) indices, zero-padded."""
        return self.pairs.padded

    @property
    def pair_rows(self) -> List[Tensor]:
        """The predicted pairs as the compiled kernels read them (per image where the reader kept them)."""
        return self.pairs.kernel_input

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


def _weaker(produced: Any, mode: str) -> bool:
    """Whether a model that produced ``produced`` predictions (metainfo ``pred_mode``) lacks what ``mode`` reads."""
    return produced in _STRENGTH and _STRENGTH[produced] < _STRENGTH[mode]


def _check_produced_mode(sample: Any, produced: Any, mode: str) -> None:
    if _weaker(produced, mode):
        raise ValueError(f'{sample_name(sample)}: the model produced {produced} predictions (metainfo '
                         f'`pred_mode`), but the metric evaluates {mode!r}: {mode} needs predicted '
                         f'{"boxes, labels and scores" if mode in ("sgdet", "phrdet") else "labels and scores"} '
                         f'in `pred_instances`; set the metric mode to {produced!r} or use a model that predicts '
                         f'them')


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
    try:
        padded = {}
        for name, values in lists.items():
            if name == 'rel_pairs':
                padded[name], ranges[name] = _read_pairs(values, cache)
            elif name in _INDEX_FIELDS:
                padded[name], ranges[name] = _pad_index_field(name, values, cache)
            else:
                padded[name] = _pad_with_lengths(values, _PAD_VALUES[name], cache)
    except (RuntimeError, TypeError, ValueError) as err:
        raise _NotFast from err
    rel_pairs, rel_lengths = padded['rel_pairs']
    num_rel = rel_lengths or [rel_pairs.width] * rel_pairs.batch_size
    if not _fits(padded, scores_list, num_rel, widths):
        raise _NotFast
    objects, model_objects = _padded_objects(mode, padded, pred_inst)
    sample_idx = [sample_index(s) for s in samples]
    fields = [padded['gt_boxes'][0].float(), padded['gt_labels'][0], padded['gt_pairs'][0],
              padded['gt_predicates'][0], objects.boxes.float(), objects.labels, objects.scores.float()]
    target = device or scores_list[0].device
    if any(f.device != target for f in fields):
        fields = [f.to(target) for f in fields]
    if any(t.device != target for t in scores_list):
        scores_list = [t.to(target) for t in scores_list]
    rel_pairs = rel_pairs.to(target)
    gt_boxes, gt_labels, gt_pairs, gt_predicates, pred_boxes, pred_labels, pred_scores = fields
    return _Padded(sample_idx=sample_idx, pred_boxes=pred_boxes, pred_labels=pred_labels,
                   pred_scores=pred_scores, gt_boxes=gt_boxes, gt_labels=gt_labels, gt_pairs=gt_pairs,
                   gt_predicates=gt_predicates, rel_pairs=rel_pairs, num_pred=objects.lengths,
                   num_gt=padded['gt_boxes'][1], num_gt_rel=padded['gt_pairs'][1], num_rel=num_rel,
                   raw_scores=[t if t.dtype == torch.float32 else t.float() for t in scores_list],
                   background=[int(t.shape[1] == num_predicates + 1) for t in scores_list],
                   single_label=[False] * len(num_rel), given_scores=[], model_objects=model_objects,
                   score_width=[t.shape[1] for t in scores_list],
                   rel_positions=cache.get(tuple(num_rel)) if rel_lengths else None, value_ranges=ranges)


def _read_pairs(values: List[Any], cache: dict):
    """``((RelationPairs, lengths or None), (min [B], max [B]) or None)`` of the predicted pairs: contiguous int64
    CPU [R_b, 2] tensors are kept as they are, unread (no padded copy, :mod:`.pairs`; their value range comes from
    the pass that ranks them, :func:`_pair_index_range`); anything else is padded as the other index fields
    (:func:`_pad_index_field`), with its value range."""
    kernels = compiled.kernels()
    first = values[0] if values else None
    if kernels is not None and type(first) is Tensor and first.dim() == 2 and first.shape[1] == 2:
        try:
            read = kernels.pad_int64_rows(values, 0, pad=False, ranges=False)
        except TypeError:  # not all tensors
            read = None
        if read is not None:
            lengths = read[3].tolist()
            lengths = None if lengths.count(max(lengths)) == len(lengths) else lengths
            return (RelationPairs(rows=values, lengths=lengths), lengths), None
    (padded, lengths), value_range = _pad_index_field('rel_pairs', values, cache)
    return (RelationPairs(padded=padded, lengths=lengths), lengths), value_range


def _pad_index_field(name: str, values: List[Any], cache: dict):
    """``(_pad_with_lengths(values, pad value of name), (min [B], max [B]) of each image's entries or None)``:
    contiguous int64 CPU tensors are padded by one compiled call, which also gives their value range (for the
    index check, without another pass over the padded batch); anything else takes :func:`_pad_with_lengths`."""
    kernels = compiled.kernels()
    padded = None
    if kernels is not None and values:
        try:
            padded = kernels.pad_int64_rows(values, _PAD_VALUES[name])
        except TypeError:  # not all tensors (numpy arrays, lists: converted by the general path)
            padded = None
    if padded is None:
        return _pad_with_lengths(values, _PAD_VALUES[name], cache), None
    out, low, high, lengths = padded
    lengths = lengths.tolist()
    width = out.shape[1]
    return (out, None if lengths.count(width) == len(lengths) else lengths), (low, high)


# the padding value of each field the field-wise reader pads
_PAD_VALUES = {'gt_boxes': 0.0, 'gt_labels': -1, 'gt_pairs': 0, 'gt_predicates': -1, 'rel_pairs': 0,
               'pred_labels': -1, 'pred_scores': 0.0, 'pred_boxes': 0.0}
# the integer index fields among them (padded with their value ranges by the compiled kernels)
_INDEX_FIELDS = ('gt_labels', 'gt_pairs', 'gt_predicates', 'rel_pairs', 'pred_labels')


def _field_lists(samples: Sequence[Any], mode: str) -> Tuple[dict, List[Any]]:
    """The per-image tensors of a batch of dict samples by field (:data:`_PAD_VALUES` names, and ``scores``: the
    score matrices), with the samples' ``pred_instances``; raises :class:`_NotFast` for other containers, a
    missing field, SGCls samples with and without model boxes in one batch, or a ``pred_mode`` that lacks what
    ``mode`` reads."""
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
    lists = {name: [detached(v) for v in values] for name, values in lists.items()}  # as to_tensor reads them
    if any(_weaker(p, mode) for p in produced):
        raise _NotFast
    return lists, pred_inst


def _fits(padded: dict, scores_list: List[Any], num_rel: List[int], widths: Tuple[int, ...]) -> bool:
    """Whether the padded GT fields and predicted pairs (``padded``: field -> (tensor, lengths)) and the score
    matrices have the shapes, dtypes and counts of the data contract (else the per-sample reader reads the batch
    and names what does not fit)."""
    (gt_boxes, num_gt), (gt_labels, num_gt_labels) = padded['gt_boxes'], padded['gt_labels']
    (gt_pairs, num_gt_rel), (gt_predicates, num_gt_predicates) = padded['gt_pairs'], padded['gt_predicates']
    rel_pairs = padded['rel_pairs'][0]
    return (rel_pairs.well_formed() and gt_boxes.dim() == 3 and gt_boxes.shape[2] == 4 and gt_labels.dim() == 2
            and gt_pairs.dim() == 3 and gt_pairs.shape[2] == 2 and gt_predicates.dim() == 2
            and not (gt_labels.is_floating_point() or gt_pairs.is_floating_point() or gt_predicates.is_floating_point())
            and num_gt_labels == num_gt and gt_labels.shape[1] == gt_boxes.shape[1]
            and num_gt_predicates == num_gt_rel and gt_predicates.shape[1] == gt_pairs.shape[1]
            and all(type(t) is Tensor and t.dim() == 2 and t.shape[0] == r and t.shape[1] in widths
                    and t.shape[1] != 1 for t, r in zip(scores_list, num_rel)))


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

    ranges = p.value_ranges or {}
    rules = [FieldRule('gt_instances.bboxes', 'boxes', p.gt_boxes, p.num_gt)]
    if mode != 'predcls':  # (SGCls without model boxes: the GT boxes again, checked above first)
        rules.append(FieldRule('pred_instances.bboxes', 'boxes', p.pred_boxes, p.num_pred))
    rules.append(FieldRule('gt_instances.labels', 'index', p.gt_labels, p.num_gt, num_classes, 'class',
                           value_range=ranges.get('gt_labels')))
    rules.append(FieldRule('gt_relations.pair_idxs', 'index', p.gt_pairs, p.num_gt_rel, num_gt, 'object',
                           zero_padded=True, value_range=ranges.get('gt_pairs')))
    rules.append(FieldRule('gt_relations.labels', 'index', p.gt_predicates, p.num_gt_rel, num_predicates,
                           'predicate', value_range=ranges.get('gt_predicates')))
    if mode != 'predcls':
        rules.append(FieldRule('pred_instances.labels', 'index', p.pred_labels, p.num_pred, num_classes, 'class',
                               value_range=ranges.get('pred_labels')))
        rules.append(FieldRule('pred_instances.scores', 'score', p.pred_scores, p.num_pred))
    pairs, pair_range = p.rel_pairs, ranges.get('rel_pairs')
    kept = pairs.rows is not None and pair_range is not None  # unpadded: the rule reads the value range alone
    rules.append(FieldRule('pred_relations.pair_idxs', 'index', None if kept else pairs.padded, p.num_rel, num_pred,
                           'object', pair_note, zero_padded=True, value_range=pair_range, padded=lambda: pairs.padded))

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
    """The score layout of a padded batch (:func:`~mmsgg_eval.functional.scores.choose_layout`)."""
    return choose_layout(padded.raw_scores, padded.background, padded.single_label, padded.num_rel, num_predicates,
                         device)


def collate_scene_graphs(samples: Sequence[Any], mode: str, num_classes: int, num_predicates: int,
                         with_masks: bool = False, device: Optional[torch.device] = None,
                         counts: Optional[ObjectCounts] = None,
                         workspace: Optional[ScoreWorkspace] = None, score_layout: str = 'auto',
                         ranking: Optional[Tuple[int, ...]] = None) -> SceneGraphBatch:
    """Read a list of samples and pad them into one validated :class:`SceneGraphBatch`.

    Well-formed dict samples are read field by field; anything else goes through :func:`read_scene_graph`.
    The value rules run once on the padded batch (the same on both paths and for any batch size). Images
    whose predicted object list does not have the GT's length (PredCls / SGCls) are added to ``counts``
    (the caller warns once per evaluation); without ``counts`` this call warns itself. ``workspace``: where
    the copy of the score matrices goes (:class:`~mmsgg_eval.functional.scores.ScoreWorkspace`: the batch
    returned then lives in it until the workspace's next batch). ``score_layout``: how score columns are read
    (:data:`SCORE_LAYOUTS`). ``ranking``: ``(k, ng_topk)`` of the ranked lists to build while the score matrices
    are read, where the compiled kernels read them (``batch.ranked_lists``, else None: the caller ranks);
    ``(k, ng_topk, True)`` also gives every pair's first maximal predicate column (``ranked_lists.pair_predicate``,
    what the error analysis' pair flags read instead of the score rows).
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
    layout = _score_layout(padded, num_predicates, device)
    read = _ranked_while_read(padded, num_predicates, ranking, workspace) \
        if ranking is not None and layout == 'compiled' else None
    _pair_index_range(padded, read[3] if read is not None else None)
    scores = build_relation_scores(padded.raw_scores, padded.background, num_rel, num_predicates,
                                   padded.single_label, padded.given_scores, layout,
                                   device=device, positions=padded.rel_positions, workspace=workspace,
                                   checked_maxima=read[1] if read is not None else None)
    _validate(samples, padded, mode, num_classes, num_predicates, scores)
    ranked = read[0] if read is not None and not bool((read[2] >= 0).any()) else None
    report = counts if counts is not None else ObjectCounts()
    for sample, listed, gt in zip(samples, padded.model_objects, _full(padded.num_gt, padded.gt_boxes)):
        if listed >= 0 and listed != gt:
            report.add(mode, sample, listed, gt)
    if counts is None:
        report.warn(mode)
    sample_idx = host_tensor([-1 if i is None else i for i in padded.sample_idx], torch.long, device)
    num_rel_t = host_tensor(num_rel, torch.long, device)
    return SceneGraphBatch(
        sample_idx=sample_idx, pred_boxes=padded.pred_boxes, pred_labels=padded.pred_labels.long(),
        pred_scores=padded.pred_scores, gt_boxes=padded.gt_boxes, gt_labels=padded.gt_labels.long(),
        gt_pairs=padded.gt_pairs.long(), gt_predicates=padded.gt_predicates.long(),
        gt_valid=_valid_mask(padded.num_gt_rel, batch_size, padded.gt_predicates.shape[1] if batch_size else 0,
                             device),
        pairs=padded.rel_pairs.long(),
        rel_valid=_valid_mask(None if max_rel and all(r == max_rel for r in num_rel) else num_rel, batch_size,
                              max_rel, device),
        num_rel_preds=num_rel_t, scores=scores, pred_masks=padded.pred_masks, gt_masks=padded.gt_masks,
        score_width=padded.score_width, ranked_lists=ranked, gt_counts=_full(padded.num_gt_rel, padded.gt_predicates),
        ids_missing=any(i is None for i in padded.sample_idx))


def _pair_index_range(padded: _Padded, ranked_range: Optional[Tuple[Tensor, Tensor]]) -> None:
    """Set the value range of predicted pairs kept unread by the reader (for the index rule): the range the
    ranking pass found, else one compiled pass over them."""
    ranges = padded.value_ranges
    if ranges is not None and ranges.get('rel_pairs') is None and padded.rel_pairs.rows is not None:
        ranges['rel_pairs'] = ranked_range if ranked_range is not None else padded.rel_pairs.index_range()


def _ranked_while_read(padded: _Padded, num_predicates: int, ranking: Tuple[int, ...],
                       workspace: Optional[ScoreWorkspace]):
    """:func:`~mmsgg_eval.functional.ranking.compiled_ranked_lists` of a padded batch in the compiled layout
    (every image's matrix read once for its row maxima, value check and both ranked lists; the per-pair outputs
    in ``workspace``, where given), or None."""
    k, ng_topk = ranking[:2]
    num_rel = torch.tensor(padded.num_rel, dtype=torch.long)
    out = workspace.take((3, len(padded.num_rel), max(padded.num_rel)), torch.device('cpu')) \
        if workspace is not None and padded.num_rel else None
    return compiled_ranked_lists(padded.raw_scores, padded.background[0], num_predicates,
                                 padded.rel_pairs.long().kernel_input, padded.pred_scores, num_rel, k, ng_topk, out,
                                 pair_predicates=len(ranking) > 2 and bool(ranking[2]))
