"""Why a GT relation is missed: one cause per GT relation, PySGG's stage-wise ranks, and their averages.

For every GT relation and every K the outcome is the FIRST of these that applies (``docs/metrics.md``):

1. ``hit``: its first-hit rank in the graph-constrained (GC) list is below K (exactly R@K's hits);
2. ``subject_loc`` / 3. ``object_loc``: no predicted object overlaps the GT subject / object (IoU >= the
   threshold, any class);
4. ``subject_cls`` / 5. ``object_cls``: some predicted object overlaps it, none of them with its class (no
   "matching" subject / object: IoU >= threshold AND the GT class, the metric's own object matching);
6. ``pair``: no predicted pair joins a matching subject to a matching object;
7. ``predicate``: such pairs are scored, but on each of them the top predicate (the GC list keeps one per
   pair: the first maximal score column) is another one;
8. ``rank``: the right triplet is in the GC list, beyond K.

Only ``hit`` depends on K: every other outcome is one K-independent code per GT relation (:func:`miss_causes`),
so the state is one byte per GT relation and the outcome at K is ``hit`` when ``rank < K``, else the code.
``no_prediction`` (images counted without any predicted pair) is decided from the image rows
(:func:`outcome_codes`). Matching follows the metric: IoU threshold compared with ``>=``, the +1-pixel
convention or not, boxes or masks; objects are always matched by IoU (PredCls / SGCls included).

Pure tensor code on padded batches (``[B, ...]`` with validity masks), any device; no MMEngine import.
"""
from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import compiled
from .limits import NO_HIT
from .matching import (ObjectMatches, first_hit_rank_bits, pair_end_bits, predicate_bits,
                       predicate_hit_bits, relation_end_bits, same_class_matrix)
from .boxes import box_iou_unchecked
from .matching import object_iou_matrix
from .transfer import sync_free
from .recall import hit_within, rank_limit

#: outcome codes (int8): 0 is a hit, then the causes in their order of precedence
HIT, SUBJECT_LOC, OBJECT_LOC, SUBJECT_CLS, OBJECT_CLS, PAIR, PREDICATE, RANK, NO_PREDICTION = range(9)
#: the codes the object overlaps decide alone, in their order of precedence (the compiled matching pass's
#: ``box_match_overlap_flags`` writes one of them per GT relation); ``PAIR`` turns into PREDICATE / RANK as the
#: pairs are scored / listed: the code + scored + listed
OVERLAP_CAUSES = (SUBJECT_LOC, OBJECT_LOC, SUBJECT_CLS, OBJECT_CLS, PAIR)
assert (PREDICATE, RANK) == (PAIR + 1, PAIR + 2), 'scored then listed moves a pair cause one code on each'
#: the causes of a miss, in code order (code = index + 1); they and ``hit`` partition the GT relations at each K
CAUSES = ('subject_loc', 'object_loc', 'subject_cls', 'object_cls', 'pair', 'predicate', 'rank', 'no_prediction')
#: causes that can occur in PredCls (its objects are the GT objects themselves)
PREDCLS_CAUSES = ('pair', 'predicate', 'rank', 'no_prediction')
#: PySGG's stage-wise keys of a GT relation list: (key family, rows column)
STAGE_RANKS = (('stage_pair_loc', 'rank_pair_loc'), ('stage_pair_det', 'rank_pair_det'),
               ('stage_pred_cls', 'rank_pred_cls'))
#: PySGG divides by n + 1e-5 (relations) and n + 1e-6 (GT objects)
STAGE_REL_EPS, STAGE_OBJ_EPS = 1e-5, 1e-6


def located_objects(iou: Tensor, pred_valid: Tensor, gt_object_valid: Tensor, iou_thr: float) -> Tensor:
    """[B, N, M] bool: predicted object n overlaps GT object m at the threshold, whatever the classes
    (``iou`` [B, N, M] as the metric computes it; padding on either side never overlaps)."""
    return (iou >= iou_thr) & pred_valid[:, :, None] & gt_object_valid[:, None, :]


def end_flags(per_object: Tensor, gt_pairs: Tensor) -> Tuple[Tensor, Tensor]:
    """(subject flag [B, G], object flag [B, G]) of GT relations from a flag of each GT object ``per_object``
    [B, M] (e.g. some predicted object overlaps it: :func:`located_objects` ``.any(1)``); ``gt_pairs`` [B, G, 2]
    0-based."""
    if per_object.shape[1] == 0:
        empty = torch.zeros(gt_pairs.shape[:2], dtype=torch.bool, device=gt_pairs.device)
        return empty, empty
    return per_object.gather(1, gt_pairs[..., 0]), per_object.gather(1, gt_pairs[..., 1])


def miss_causes(subject_located: Tensor, object_located: Tensor, subject_matched: Tensor, object_matched: Tensor,
                pair_scored: Tensor, in_list: Tensor) -> Tensor:
    """[B, G] int8 cause code of each GT relation when missed (SUBJECT_LOC ... RANK): the first that applies.

    Inputs [B, G] bool: an overlapping predicted object exists for the subject / object; a matching one (IoU and
    class) exists; a predicted pair joins a matching subject to a matching object; such a pair's top predicate
    is the GT one (the triplet is in the GC list). A matching object overlaps, so ``*_located`` is taken as
    ``located | matched`` (the class test adds to the overlap test, whatever rounding of the IoU)."""
    code = torch.full(in_list.shape, RANK, dtype=torch.int8, device=in_list.device)
    for flag, value in ((in_list, PREDICATE), (pair_scored, PAIR), (object_matched, OBJECT_CLS),
                        (subject_matched, SUBJECT_CLS), (object_located | object_matched, OBJECT_LOC),
                        (subject_located | subject_matched, SUBJECT_LOC)):
        code = torch.where(flag, code, value)  # a Python scalar keeps the int8 dtype
    return code


def effective_codes(cause: Tensor, no_prediction: Optional[Tensor] = None) -> Tensor:
    """[G] the code of each GT relation when missed: its cause, or NO_PREDICTION where ``no_prediction`` [G]
    (relations of images counted without predictions); the dtype of ``cause``."""
    if no_prediction is None:
        return cause
    return torch.where(no_prediction, torch.full((), NO_PREDICTION, dtype=cause.dtype, device=cause.device), cause)


def outcome_codes(rank: Tensor, cause: Tensor, k: int, no_prediction: Optional[Tensor] = None) -> Tensor:
    """[G] outcome at K of GT relations: HIT where ``rank < K`` (:func:`~.recall.hit_within`), else the cause
    code, or NO_PREDICTION where ``no_prediction`` [G] (relations of images counted without predictions)."""
    return torch.where(hit_within(rank, k), torch.zeros((), dtype=cause.dtype),
                       effective_codes(cause, no_prediction))


def as_rank(selected: Tensor) -> Tensor:
    """Ranks that count a relation at K = 1 exactly where ``selected``: 0 there, NO_HIT elsewhere (so the
    recall functions average a selection as they average hits)."""
    return torch.where(selected, 0, NO_HIT)


class _Shares:
    """Shares from per-unit outcome counts [U, C] (unit: an image) whose units hold ``total`` [U] relations each:
    the mean over the units with relations of count / their relations (``'image'``, as
    :func:`~.recall.recall_from_ranks`), or total / total (``'micro'``); the units' totals are read once for
    every K (each relation has one outcome at every K)."""

    def __init__(self, total: Tensor, average: str) -> None:
        self.average, self.all = average, total.sum().double()
        self.any = bool(self.all > 0)
        self.rows = (total > 0).nonzero().squeeze(1)
        self.held = total.index_select(0, self.rows).double()[:, None]

    def __call__(self, counts: Tensor) -> Tensor:
        """[..., C] shares of ``counts`` [..., U, C] (int64; e.g. [K, U, C]: every K at once)."""
        if self.average == 'micro':
            return counts.sum(-2).double() / self.all if self.any else \
                torch.zeros(counts.shape[:-2] + counts.shape[-1:], dtype=torch.float64)
        if not self.rows.numel():
            return torch.zeros(counts.shape[:-2] + counts.shape[-1:], dtype=torch.float64)
        return (counts.index_select(-2, self.rows).double() / self.held).mean(-2)


def outcome_counts(rank: Tensor, cause: Tensor, unit: Tensor, num_units: int, ks: Sequence[int],
                   no_prediction: Optional[Tensor] = None, size: int = len(CAUSES) + 1) -> Tensor:
    """[len(ks), U, size] int64: per K, the GT relations of each unit (``unit`` [G] in [0, U)) with each outcome
    code at K (:func:`outcome_codes`; ``size`` > every code), every K in one bincount."""
    n = len(ks)
    limits = torch.tensor([rank_limit(k) for k in ks], dtype=rank.dtype, device=rank.device)
    outcome = torch.where(rank[None, :] < limits[:, None], 0, effective_codes(cause, no_prediction).long()[None, :])
    index = (torch.arange(n, device=rank.device)[:, None] * num_units + unit.long()[None, :]) * size + outcome
    return torch.bincount(index.view(-1), minlength=n * num_units * size).view(n, num_units, size)


def cause_shares(rank: Tensor, cause: Tensor, image_of: Tensor, num_images: int, ks: Sequence[int],
                 average: str = 'image', no_prediction: Optional[Tensor] = None,
                 ngc_rank: Optional[Tensor] = None, ng_topk: int = 0) -> Dict[str, Tensor]:
    """``{'hit' | cause: [len(ks)] fraction}``: the share of GT relations with each outcome at each K, averaged as
    R@K is (``average`` 'image': per image, then the mean over the images with relations; 'micro': over all
    relations), so that per image 'hit' + every cause = 1 ('hit' is R@K). With ``ngc_rank`` also
    ``predicate_ng``: relations missed for ``predicate`` whose no-graph-constraint rank is below min(K,
    ``ng_topk``) (a subset of ``predicate``). The counts of every K from :func:`outcome_counts`."""
    names = ('hit',) + CAUSES
    image_of = image_of.long()
    counted = outcome_counts(rank, cause, image_of, num_images, ks, no_prediction, len(names))  # [K, I, outcomes]
    shares = _Shares(torch.bincount(image_of, minlength=num_images), average)
    out = dict(zip(names, shares(counted).t().contiguous().unbind(0)))  # every K and outcome at once
    if ngc_rank is not None and not len(ks):
        out['predicate_ng'] = torch.zeros(0, dtype=torch.float64)
    elif ngc_rank is not None:  # per K and image, the relations missed for predicate_ng
        at = (effective_codes(cause, no_prediction) == PREDICATE).nonzero().squeeze(1)  # missed for predicate
        limits = torch.tensor([[rank_limit(k), rank_limit(min(int(k), int(ng_topk)))] for k in ks])
        ng = (rank.index_select(0, at)[None, :] >= limits[:, :1]) & (ngc_rank.index_select(0, at)[None, :] <
                                                                     limits[:, 1:])
        unit = torch.arange(len(ks))[:, None] * num_images + image_of.index_select(0, at)[None, :]
        ng_count = torch.bincount(unit[ng], minlength=len(ks) * num_images).view(len(ks), num_images)
        # the share of the subset among ALL the image's relations: [rest, subset] per K and image
        out['predicate_ng'] = shares(torch.stack([counted.sum(2) - ng_count, ng_count], 2))[:, 1].contiguous()
    return out


def per_predicate_cause_shares(rank: Tensor, cause: Tensor, predicate: Tensor, image_of: Tensor, num_images: int,
                               num_predicates: int, ks: Sequence[int], average: str = 'image',
                               no_prediction: Optional[Tensor] = None) -> Dict[str, Tensor]:
    """``{'hit' | cause: [len(ks), P] fraction}``: for each predicate, the share of its GT relations with each
    outcome, averaged as its mR@K recall is (:func:`~.recall.per_predicate_recall`: 'image', the mean over the
    images holding it of the image's share; 'micro', over all its relations): per predicate present, 'hit' +
    every cause = 1; 0 for an absent predicate. Counted on the (image, predicate) cells that hold relations."""
    names = ('hit',) + CAUSES
    size = len(names)
    cells, cell = torch.unique(image_of.long() * num_predicates + predicate.long(), return_inverse=True)
    cell_predicate = cells % num_predicates
    n, num_cells = len(ks), cells.numel()
    counts = outcome_counts(rank, cause, cell, num_cells, ks, no_prediction, size).double()  # [K, cells, size]
    # each (K, predicate) row sums its cells in cell order, as one index_add_ per K would
    rows = (torch.arange(n)[:, None] * num_predicates + cell_predicate[None, :]).view(-1)
    if average == 'micro':
        sums = torch.zeros((n * num_predicates, size), dtype=torch.float64).index_add_(
            0, rows, counts.view(-1, size)).view(n, num_predicates, size)
        table = sums / sums.sum(2, keepdim=True).clamp(min=1)
    else:
        total = torch.bincount(cell, minlength=num_cells).double()[None, :, None]  # the cell's relations
        sums = torch.zeros((n * num_predicates, size), dtype=torch.float64).index_add_(
            0, rows, (counts / total).view(-1, size)).view(n, num_predicates, size)
        held = torch.bincount(cell_predicate, minlength=num_predicates).double()
        table = sums / held.clamp(min=1)[None, :, None]
    return {name: table[:, :, i].contiguous() for i, name in enumerate(names)}


def stage_recall(rank: Tensor, image_of: Tensor, num_images: int, count: Tensor, ks: Sequence[int]) -> Tensor:
    """[len(ks)] PySGG's stage-wise recall of first-hit ranks ``rank`` [G]: per image the relations found within K
    over (its GT relations ``count`` [I] + 1e-5), then the mean over the ``num_images`` images."""
    if not num_images or not len(ks):
        return torch.zeros(len(ks), dtype=torch.float64)
    image_of = image_of.long()
    denominator = count.double() + STAGE_REL_EPS
    # the relations found within K per image: a bincount weighted by the hits (no index list of them)
    return torch.stack([(torch.bincount(image_of, hit_within(rank, k).double(), num_images) / denominator).mean()
                        for k in ks])


def instance_recall(found: Tensor, num_objects: Tensor) -> Tensor:
    """PySGG's instance recall: the mean over images of found GT objects / (GT objects + 1e-6); 0 without
    images (``found``, ``num_objects`` [I] counts)."""
    if not found.numel():
        return torch.zeros((), dtype=torch.float64)
    return (found.double() / (num_objects.double() + STAGE_OBJ_EPS)).mean()


def error_analysis_rows(batch, first_hits, pair_ranks, end_bits: Tuple[Tensor, Tensor], gc_order: Tensor,
                        gc_valid: Tensor, gc_predicate: Optional[Tensor], gc_ends: Optional[Tensor], iou_thr: float,
                        plus_one: bool, use_masks: bool, evidence: bool = True) -> Dict[str, Tensor]:
    """The error-analysis outputs of :func:`~.first_hits.scene_graph_ranks` for one padded batch, built on the
    metric's own matching: ``first_hits`` / ``pair_ranks`` / ``end_bits`` are its first-hit ranker's
    (:func:`~.first_hits._first_hit_ranker`: compiled or torch, boxes or masks), ``gc_*`` its graph-constrained list
    (``gc_predicate`` / ``gc_ends`` [B, J, 2] when known).

    Returns, per GT relation [B, G]: ``'cause'`` int8 (:func:`miss_causes`), the stage-wise first-hit ranks in the
    GC list ``'rank_pair_loc'`` (both ends overlapped, classes and predicate ignored), ``'rank_pair_det'`` (both ends
    matched with their classes: the metric's pair ranks), ``'rank_pred_cls'`` (both ends overlapped and the
    predicate), int32, also as one tensor ``'stage_ranks'`` [3, B, G] in :data:`STAGE_RANKS` order; the evidence
    ``'subject_iou'`` / ``'object_iou'`` (best IoU of any predicted object with the end, float32, 0 without one),
    ``'subject_det_label'`` / ``'object_det_label'`` (that object's class, -1 without one) and
    ``'subject_det_score'`` / ``'object_det_score'`` (its score, 0 without one); per image [B] int32:
    ``'num_gt_objects'``, ``'inst_loc'`` / ``'inst_det'`` (GT objects overlapped by some predicted object, without
    / with its class). With the compiled kernels the overlaps come from the matching's own pass
    (``first_hits.overlaps``, :func:`~.first_hits._compiled_first_hit_ranker`): the codes before the pairs, then
    + scored + listed (:data:`OVERLAP_CAUSES`)."""
    pair_flags = getattr(first_hits, 'pair_flags', None)
    kernels = compiled.kernels() if pair_flags is not None and not use_masks else None
    overlaps = getattr(first_hits, 'overlaps', None) if kernels is not None else None
    if overlaps is not None:  # the matching's own pass gave the overlaps: few tensor operations
        located_ends, cause, (num_objects, inst_loc, inst_det) = overlaps
        pair_scored, in_list = pair_flags()  # a scored pair has matched ends: only PAIR codes move on
        cause = torch.add(cause, pair_scored).add_(in_list)  # a new tensor: the ranker's outputs stay as they are
        stages = stage_ranks(batch, kernels, located_ends, end_bits, pair_ranks, gc_order, gc_valid, gc_predicate,
                             gc_ends)
        out = {'cause': cause, **_stage_outputs(stages), 'num_gt_objects': num_objects, 'inst_loc': inst_loc,
               'inst_det': inst_det}
        if evidence:
            out.update(end_evidence(batch, _object_overlaps(batch, plus_one, use_masks), batch.gt_pairs[..., 0],
                                    batch.gt_pairs[..., 1]))
        return out
    gt_pairs, gt_valid = batch.gt_pairs, batch.gt_valid
    gt_sub, gt_obj = gt_pairs[..., 0], gt_pairs[..., 1]
    subject_bits, object_bits = end_bits
    gt_object_valid = batch.gt_labels >= 0
    iou = None
    if kernels is not None and hasattr(kernels, 'box_overlap_flags'):
        # the compiled kernels: every (predicted, GT) object pair once, no [B, N, M] IoU tensor
        located_any, detected_any, loc_subject, loc_object = kernels.box_overlap_flags(
            batch.pred_boxes.float(), batch.pred_labels, batch.gt_boxes.float(), batch.gt_labels, gt_pairs, gt_valid,
            float(iou_thr), bool(plus_one))
    else:
        iou = _object_overlaps(batch, plus_one, use_masks)
        located = located_objects(iou, batch.pred_labels >= 0, gt_object_valid, iou_thr)
        detected = located & same_class_matrix(batch.pred_labels, batch.gt_labels)
        located_any, detected_any = located.any(1), detected.any(1)  # [B, M]: some predicted object overlaps / matches
        overlapping = located if sync_free(located.device) else ObjectMatches.from_matrix(located)  # no list to size
        loc_subject, loc_object = relation_end_bits(overlapping, gt_sub, gt_obj, gt_valid)

    # the cause of a miss: overlap, class, pair, predicate, over every predicted pair of the image
    subject_located, object_located = end_flags(located_any, gt_pairs)
    subject_matched, object_matched = end_flags(detected_any, gt_pairs)
    if pair_flags is not None:  # the compiled kernels: one pass over every pair, no index list
        pair_scored, in_list = pair_flags()
    else:  # the first-hit ranks of the list of every pair, in pair order
        every_pair = torch.arange(batch.rel_valid.shape[1], device=gc_order.device).expand_as(batch.rel_valid)
        every_pair = every_pair.contiguous()
        pair_scored = pair_ranks(every_pair, batch.rel_valid) < NO_HIT
        in_list = first_hits(every_pair, batch.rel_valid, None, None) < NO_HIT
    # a scored pair of matching ends proves both matches by the metric's own matching (its bit sets), whatever
    # the rounding of this IoU at the threshold: the causes stay nested (in list => pair => matched => located)
    cause = miss_causes(subject_located, object_located, subject_matched | pair_scored, object_matched | pair_scored,
                        pair_scored, in_list)

    # PySGG's stage-wise ranks in the graph-constrained list (overlap: located, or matched whatever the rounding)
    loc_subject, loc_object = loc_subject | subject_bits, loc_object | object_bits
    stages = stage_ranks(batch, kernels, (loc_subject, loc_object), end_bits, pair_ranks, gc_order, gc_valid,
                         gc_predicate, gc_ends)
    out = {'cause': cause, **_stage_outputs(stages),
           'num_gt_objects': gt_object_valid.sum(1, dtype=torch.int32),
           'inst_loc': (located_any & gt_object_valid).sum(1, dtype=torch.int32),
           'inst_det': (detected_any & gt_object_valid).sum(1, dtype=torch.int32)}

    if evidence:
        out.update(end_evidence(batch, iou if iou is not None else _object_overlaps(batch, plus_one, use_masks),
                                gt_sub, gt_obj))
    return out


def _stage_outputs(stages: Tensor) -> Dict[str, Tensor]:
    """``'stage_ranks'`` [3, B, G] and its rows by their :data:`STAGE_RANKS` column names."""
    return {'stage_ranks': stages, **dict(zip((column for _, column in STAGE_RANKS), stages.unbind(0)))}


def stage_ranks(batch, kernels, located_ends: Tuple[Tensor, Tensor], end_bits: Tuple[Tensor, Tensor], pair_ranks,
                gc_order: Tensor, gc_valid: Tensor, gc_predicate: Optional[Tensor],
                gc_ends: Optional[Tensor]) -> Tensor:
    """PySGG's stage-wise first-hit ranks [3, B, G] int32 in the graph-constrained list, in :data:`STAGE_RANKS`
    order: ``rank_pair_loc`` (both ends in ``located_ends``' bit sets), ``rank_pair_det`` (both ends matched with
    their classes: the metric's pair ranks) and ``rank_pred_cls`` (located ends and the listed predicate); the
    compiled kernels on the listed entries' own ends when ``kernels`` and the list's ends and predicates are given
    (``stage_first_hit_ranks``: one pass for the three), else the torch bit sets."""
    if kernels is not None and gc_ends is not None and gc_predicate is not None and \
            hasattr(kernels, 'stage_first_hit_ranks'):
        return kernels.stage_first_hit_ranks(end_bits[0], end_bits[1], located_ends[0], located_ends[1],
                                             batch.gt_predicates, batch.gt_valid, gc_ends, gc_valid, gc_predicate,
                                             batch.scores.num_predicates)
    if kernels is not None and gc_ends is not None and gc_predicate is not None:
        # the compiled first-hit kernel on the listed entries' own (subject, object): no [B, J, W] bit tensors
        positions = torch.arange(gc_ends.shape[1], device=gc_ends.device).expand(gc_ends.shape[0], -1).contiguous()
        num_pred = batch.scores.num_predicates

        def stage_rank(ends: Tuple[Tensor, Tensor], predicate: Optional[Tensor]) -> Tensor:
            return kernels.first_hit_ranks(ends[0], ends[1], batch.gt_predicates, batch.gt_valid, [gc_ends], positions,
                                           gc_valid, predicate, None, [], None, 0, num_pred, predicate is None)
        rank_pair_loc, rank_pred_cls = stage_rank(located_ends, None), stage_rank(located_ends, gc_predicate)
        rank_pair_det = stage_rank(end_bits, None)  # = pair_ranks(gc_order, gc_valid), without the pair lookups
    else:
        if gc_ends is not None:
            list_sub, list_obj = gc_ends[..., 0], gc_ends[..., 1]
        else:
            pairs = batch.rel_pairs
            list_sub, list_obj = pairs[..., 0].gather(1, gc_order), pairs[..., 1].gather(1, gc_order)
        loc_ends = pair_end_bits(located_ends[0], located_ends[1], list_sub, list_obj, gc_valid)
        if gc_predicate is None:
            gc_predicate = batch.scores.predicate_at(gc_order, gc_valid)
        carries = predicate_bits(batch.gt_predicates, batch.gt_valid, batch.scores.num_predicates)
        rank_pair_loc = first_hit_rank_bits(loc_ends, batch.gt_predicates.shape[1])
        rank_pred_cls = first_hit_rank_bits(predicate_hit_bits(loc_ends, carries, gc_predicate, gc_valid),
                                            batch.gt_predicates.shape[1])
        rank_pair_det = pair_ranks(gc_order, gc_valid)
    return torch.stack([rank_pair_loc, rank_pair_det, rank_pred_cls])


def _object_overlaps(batch, plus_one: bool, use_masks: bool) -> Tensor:
    """[B, N, M] class-agnostic IoU of the predicted and GT objects (masks, or boxes without the NaN clean-up:
    0/0 of two empty boxes compares False with every threshold, as IoU 0 does: iou_thr > 0)."""
    return object_iou_matrix(batch, plus_one, True) if use_masks else \
        box_iou_unchecked(batch.pred_boxes, batch.gt_boxes, plus_one)


def end_evidence(batch, iou: Tensor, gt_sub: Tensor, gt_obj: Tensor) -> Dict[str, Tensor]:
    """The evidence of each GT relation's ends [B, G]: ``'{end}_iou'`` the best IoU of any predicted object with it
    (float32, 0 without one), ``'{end}_det_label'`` / ``'{end}_det_score'`` that object's class (-1 without one) and
    score (0) (``iou`` [B, N, M], NaN for two empty boxes)."""
    out: Dict[str, Tensor] = {}
    pred_valid = batch.pred_labels >= 0
    # evidence: the best-overlapping predicted object of each end (first on ties)
    iou = torch.nan_to_num(iou, nan=0.0)
    best_iou, best_det = torch.where(pred_valid[:, :, None], iou, iou.new_full((), -1.0)).max(1) \
        if iou.shape[1] else (iou.new_full((iou.shape[0], iou.shape[2]), -1.0),
                               torch.full((iou.shape[0], iou.shape[2]), -1, dtype=torch.long, device=iou.device))
    has = best_iou >= 0
    best_iou, best_det = torch.where(has, best_iou, 0.0), torch.where(has, best_det, -1)
    if best_iou.shape[1] == 0:
        best_iou, best_det = best_iou.new_zeros((best_iou.shape[0], 1)), best_det.new_full((best_det.shape[0], 1), -1)
    for end, index in (('subject', gt_sub), ('object', gt_obj)):
        det = best_det.gather(1, index)
        out[f'{end}_iou'] = best_iou.gather(1, index)
        if batch.pred_labels.shape[1]:
            at = det.clamp(min=0)
            out[f'{end}_det_label'] = torch.where(det >= 0, batch.pred_labels.gather(1, at), -1)
            out[f'{end}_det_score'] = torch.where(det >= 0, batch.pred_scores.float().gather(1, at), 0.0)
        else:
            out[f'{end}_det_label'], out[f'{end}_det_score'] = torch.full_like(det, -1), torch.zeros_like(det).float()
    return out
