"""Reading a batch of scene-graph data samples into one validated :class:`SceneGraphBatch`.

Metrics receive MMEngine data samples (``DetDataSample`` or their ``to_dict()`` form, or plain dicts of
numpy arrays in offline evaluation). Two readers build the same padded tensors:

* the field-wise reader takes well-formed dict batches (what MMEngine's evaluator passes) field by field;
* the per-sample reader (:func:`read_scene_graph`) takes anything else, and explains every structural
  problem (a missing field, a wrong shape, a count that does not fit) naming the sample and the field.

This module collates and validates (:func:`collate_scene_graphs`); the field-wise reader is :mod:`.padded`, the
per-sample reader and the objects per mode :mod:`.sample_reader`, the types they produce :mod:`.batch`.

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
from typing import Any, Generator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional.overlap import Pending, Staged
from ..functional.ranking import compiled_ranked_lists, compiled_ranked_lists_beside
from ..functional.transfer import host_tensor
from ..functional.scores import RelationScores, ScoreWorkspace, build_relation_scores, choose_layout
from .batch import MODES, SCORE_LAYOUTS, ObjectCounts, SceneGraphBatch, _valid_mask
from .fields import sample_name
from .padded import _NotFast, _Padded, _fast_padded, _full, _padded_from_items
from .sample_reader import ObjectList, evaluated_objects, read_scene_graph  # noqa: F401  (the readers' public names)
from .validation import FieldRule, validate_padded


def _check_sample_ids(samples: Sequence[Any], ids: List[Optional[int]]) -> None:
    """A ``sample_idx`` may appear once per batch (the metrics remove sampler repeats before reading)."""
    if len(set(ids)) == len(ids):  # all distinct (the usual case, decided in one C-level pass)
        return
    seen = {}
    for pos, idx in enumerate(ids):
        if idx is None:
            continue
        if idx in seen:
            raise ValueError(f'{sample_name(samples[pos])}: `sample_idx` {idx} appears twice in one batch (also '
                             f'{sample_name(samples[seen[idx]])}); each dataset sample must be read once')
        seen[idx] = pos


def _validate(samples: Sequence[Any], p: _Padded, mode: str, num_classes: int, num_predicates: int,
              scores: Optional[RelationScores], part: str = 'all') -> None:
    """Every value rule of the data contract on the padded batch (see :mod:`.validation`); ``part``:
    ``'before_pass'`` the rules that do not read the ranking pass (all but the predicted pairs' indices and the
    relation scores; ``scores`` unused), ``'after_pass'`` those two."""
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

    ranges, flags = p.value_ranges or {}, p.value_flags or {}  # what the reader's compiled padding read already
    rules = [FieldRule('gt_instances.bboxes', 'boxes', p.gt_boxes, p.num_gt, bad=flags.get('gt_boxes'))]
    if mode != 'predcls':  # (SGCls without model boxes: the GT boxes again, checked above first)
        rules.append(FieldRule('pred_instances.bboxes', 'boxes', p.pred_boxes, p.num_pred, bad=flags.get('pred_boxes')))
    rules.append(FieldRule('gt_instances.labels', 'index', p.gt_labels, p.num_gt, num_classes, 'class',
                           value_range=ranges.get('gt_labels')))
    rules.append(FieldRule('gt_relations.pair_idxs', 'index', p.gt_pairs, p.num_gt_rel, num_gt, 'object',
                           zero_padded=True, value_range=ranges.get('gt_pairs')))
    rules.append(FieldRule('gt_relations.labels', 'index', p.gt_predicates, p.num_gt_rel, num_predicates,
                           'predicate', value_range=ranges.get('gt_predicates')))
    if mode != 'predcls':
        rules.append(FieldRule('pred_instances.labels', 'index', p.pred_labels, p.num_pred, num_classes, 'class',
                               value_range=ranges.get('pred_labels')))
        rules.append(FieldRule('pred_instances.scores', 'score', p.pred_scores, p.num_pred,
                               bad=flags.get('pred_scores')))
    if part == 'before_pass':
        validate_padded(rules, samples)
        return
    if part == 'after_pass':
        rules = []
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
    ``(k, ng_topk, True)`` also gives every pair's (subject, object) in two bytes (``ranked_lists.pair_codes``,
    what the error analysis' pair scan reads instead of the pair list); a fourth element ``(length, per_pair,
    min_score)`` also each image's Open Images list (``ranked_lists.oi_lists``).
    """
    return Staged(collate_stages(samples, mode, num_classes, num_predicates, with_masks, device, counts, workspace,
                                 score_layout, ranking)).result()


def collate_stages(samples: Sequence[Any], mode: str, num_classes: int, num_predicates: int,
                   with_masks: bool = False, device: Optional[torch.device] = None,
                   counts: Optional[ObjectCounts] = None,
                   workspace: Optional[ScoreWorkspace] = None, score_layout: str = 'auto',
                   ranking: Optional[Tuple[int, ...]] = None, background: bool = False,
                   pass_workspace: Optional[ScoreWorkspace] = None) -> Generator[bool, None, SceneGraphBatch]:
    """:func:`collate_scene_graphs` in two stages (:class:`~mmsgg_eval.functional.overlap.Staged`): the samples
    are read and padded, the compiled ranking pass is started (in the background thread with ``background``)
    and the rules that do not read the pass are checked; the generator then yields True when the rest may wait
    (a pass in the background, no error yet), then the batch is validated and built. So the values the pass
    checks (relation scores, predicted pair indices) are the only errors a caller that defers the second stage
    sees late.
    ``pass_workspace``: where the pass writes its per-pair outputs (default ``workspace``; a caller overlapping
    pools alternates two, as the batch of one pool lives in its buffer while the next pool's pass runs)."""
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
    pending = _ranked_while_read(padded, num_predicates, ranking, pass_workspace or workspace, background) \
        if ranking is not None and layout == 'compiled' else None
    deferred = pending is not None and pending.in_background
    if deferred:  # the rules that need no pass now: their errors are raised by this call, as without a pass
        try:
            _validate(samples, padded, mode, num_classes, num_predicates, None, 'before_pass')
        except ValueError:
            deferred = False  # the batch's first error (in sample order, any rule) is raised below, now
    yield deferred
    read = pending.result() if pending is not None else None
    _pair_index_range(padded, read[3] if read is not None else None)
    scores = build_relation_scores(padded.raw_scores, padded.background, num_rel, num_predicates,
                                   padded.single_label, padded.given_scores, layout,
                                   device=device, positions=padded.rel_positions, workspace=workspace,
                                   checked_maxima=read[1] if read is not None else None)
    _validate(samples, padded, mode, num_classes, num_predicates, scores, 'after_pass' if deferred else 'all')
    ranked = read[0] if read is not None and not bool((read[2] >= 0).any()) else None
    report = counts if counts is not None else ObjectCounts()
    if max(padded.model_objects, default=-1) >= 0:  # some image's object list is compared with the GT's
        for sample, listed, gt in zip(samples, padded.model_objects, _full(padded.num_gt, padded.gt_boxes)):
            if listed >= 0 and listed != gt:
                report.add(mode, sample, listed, gt)
    if counts is None:
        report.warn(mode)
    ids = padded.sample_idx
    sample_idx = host_tensor(ids if None not in ids else [-1 if i is None else i for i in ids], torch.long, device)
    num_rel_t = host_tensor(num_rel, torch.long, device)
    return SceneGraphBatch(
        sample_idx=sample_idx, pred_boxes=padded.pred_boxes, pred_labels=padded.pred_labels.long(),
        pred_scores=padded.pred_scores, gt_boxes=padded.gt_boxes, gt_labels=padded.gt_labels.long(),
        gt_pairs=padded.gt_pairs.long(), gt_predicates=padded.gt_predicates.long(),
        gt_valid=_valid_mask(padded.num_gt_rel, batch_size, padded.gt_predicates.shape[1] if batch_size else 0,
                             device),
        pairs=padded.rel_pairs.long(),
        rel_width=max_rel, rel_lengths=None if max_rel and all(r == max_rel for r in num_rel) else num_rel,
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
                       workspace: Optional[ScoreWorkspace], background: bool = False) -> Pending:
    """:func:`~mmsgg_eval.functional.ranking.compiled_ranked_lists` of a padded batch in the compiled layout
    (every image's matrix read once for its row maxima, value check and both ranked lists; the per-pair outputs
    in ``workspace``, where given; its result None where the kernels do not apply), with ``background`` started
    on background threads, the caller reading the images left when it asks for the result
    (:func:`~mmsgg_eval.functional.ranking.compiled_ranked_lists_beside`)."""
    k, ng_topk = ranking[:2]
    num_rel = torch.tensor(padded.num_rel, dtype=torch.long)
    out = workspace.take((3, len(padded.num_rel), max(padded.num_rel)), torch.device('cpu')) \
        if workspace is not None and padded.num_rel else None
    args = (padded.raw_scores, padded.background[0], num_predicates, padded.rel_pairs.long().kernel_input,
            padded.pred_scores, num_rel, k, ng_topk, out, len(ranking) > 2 and bool(ranking[2]),
            ranking[3] if len(ranking) > 3 else None)
    return compiled_ranked_lists_beside(*args) if background else Pending(compiled_ranked_lists(*args))
