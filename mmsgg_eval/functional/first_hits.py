"""First-hit ranks: for each GT relation of a padded batch, the 0-based position of the first entry that hits it
in each ranked list (graph-constrained, no-graph-constraint, the GT-pair sub-list): :func:`scene_graph_ranks`.
"Hit within the top K" is then ``rank < K`` for every K, so one pass serves all K and all metrics. Matched
objects are bit sets of GT relations (torch, or the compiled kernels for boxes on the CPU); phrase detection
matches union boxes.
"""
from typing import Callable, Dict, Optional

import torch
from torch import Tensor

from . import compiled
from .diagnostics import HEAD_ENTRIES
from .error_causes import OVERLAP_CAUSES
from .limits import NO_HIT
from .matching import (first_hit_rank, first_hit_rank_bits, gt_pair_sublist, object_match_list, object_match_matrix,
                       pair_end_bits, predicate_bits, predicate_hit_bits, relation_end_bits, triplet_hits)
from .no_graph_constraint import no_graph_constraint_list
from .ranking import graph_constrained_ranking
from .transfer import sync_free


def scene_graph_ranks(batch, max_k: int, ng_topk: int, iou_thr: float = 0.5, plus_one: bool = False,
                      phrase: bool = False, use_masks: bool = False, rank_by: str = 'score',
                      with_pair_accuracy: bool = True, list_length: int = 0,
                      analysis: Optional[Callable[..., Dict[str, Tensor]]] = None) -> Dict[str, Tensor]:
    """First-hit ranks of every GT relation in the ranked lists of a :class:`SceneGraphBatch`.

    Returns ``{'gc': [B, G], 'ngc': [B, G], 'pair_acc': [B, G] (if asked)}`` int32; a GT relation not hit
    within a list has rank ``NO_HIT`` (2**30). ``'top_predicate'`` [B]: the predicate of each image's first
    graph-constrained entry (-1 for an image without pairs), and ``'head_predicate'`` / ``'head_valid'`` [B, L]
    those of its first ``diagnostics.HEAD_ENTRIES``, for the score-column diagnostics.
    ``rank_by='given'`` keeps the input order of the pairs for the graph-constrained list.
    ``list_length`` > 0 also returns the head of each image's graph-constrained list (per-image results,
    :mod:`mmsgg_eval.metrics.per_image`): ``'gc_pairs'`` [B, L] pair indices, ``'gc_predicate'`` [B, L],
    ``'gc_score'`` [B, L] triplet scores, ``'gc_valid'`` [B, L] (L <= ``list_length``), and per GT relation
    ``'pair_rank'`` [B, G], the first graph-constrained position (below ``max_k``) whose pair matches both its
    ends whatever the predicate (``NO_HIT`` when none; always ``NO_HIT`` for ``phrase``), and ``'pair_predicate'``
    [B, G] the predicate of that entry (what the model ranked highest on the GT pair; -1 when none).
    ``analysis`` (not for ``phrase``): a function given this batch's own matching and graph-constrained list,
    whose outputs are added (:func:`~.error_causes.error_analysis_rows`: the miss cause of every GT relation and
    PySGG's stage-wise ranks), called as ``analysis(batch, first_hits, pair_ranks, end_bits, gc_order, gc_valid,
    gc_predicate, gc_ends, iou_thr, plus_one, use_masks)`` (see :func:`_first_hit_ranker`).
    """
    if analysis is not None and phrase:
        raise ValueError('error analysis is not defined for phrase detection (union-box matching)')
    scores = batch.scores  # the predicate scores, in the layout the reader chose
    first_hits, pair_ranks, end_bits = _first_hit_ranker(batch, iou_thr, plus_one, phrase, use_masks,
                                                         overlaps=analysis is not None)

    # the graph-constrained list (real pairs first); both lists may have been built while the scores were read
    ranked = getattr(batch, 'ranked_lists', None)
    if ranked is not None and not ranked.serves(max_k, ng_topk, rank_by):
        ranked = None
    gc_predicate = None  # the listed pairs' predicates, when known (else looked up where needed)
    if ranked is not None:
        gc_order, gc_valid, gc_score, pair_score = ranked.gc_order, ranked.gc_valid, ranked.gc_score, \
            ranked.pair_score
        gc_predicate = ranked.gc_predicate
    else:
        gc_order, gc_valid, gc_score, pair_score = graph_constrained_ranking(batch, max_k, rank_by, prefix=True)
    out = {'gc': first_hits(gc_order, gc_valid, gc_predicate, None, ranked.gc_ends if ranked is not None else None)}
    if list_length > 0:
        out.update(_list_head(batch, gc_order, gc_valid, gc_score, list_length, pair_ranks, gc_predicate))
    if gc_order.shape[1]:
        length = min(HEAD_ENTRIES, gc_order.shape[1])
        head, head_valid = gc_order[:, :length], gc_valid[:, :length]
        top = gc_predicate[:, :length] if gc_predicate is not None else scores.predicate_at(head, head_valid)
        top = torch.where(head_valid, top, -1)
        out['top_predicate'], out['head_predicate'], out['head_valid'] = top[:, 0], top, head_valid
    else:
        out['top_predicate'] = torch.full((gc_order.shape[0],), -1, dtype=torch.long, device=batch.device)
        out['head_predicate'] = out['top_predicate'][:, None][:, :0]
        out['head_valid'] = torch.zeros_like(out['head_predicate'], dtype=torch.bool)

    # the graph-constrained top pairs bound the no-graph-constraint list's threshold
    if ranked is not None:
        ng_pair, ng_pred, ng_valid = ranked.ng_pair, ranked.ng_predicate, ranked.ng_valid
    else:
        ng_pair, ng_pred, ng_valid = no_graph_constraint_list(scores, batch.rel_valid, ng_topk, pair_score,
                                                              gc_order, gc_valid, batch.num_rel_preds)
    out['ngc'] = first_hits(ng_pair, ng_valid, ng_pred, None, ranked.ng_ends if ranked is not None else None)

    if with_pair_accuracy:
        acc_order, acc_valid, acc_positions = gt_pair_sublist(batch, gc_score, max_k, rank_by)
        out['pair_acc'] = first_hits(acc_order, acc_valid, None, acc_positions)
    if analysis is not None:
        gc_ends = ranked.gc_ends if ranked is not None else None
        out.update(analysis(batch, first_hits, pair_ranks, end_bits, gc_order, gc_valid, gc_predicate, gc_ends,
                            iou_thr, plus_one, use_masks))
    return out


def _first_hit_ranker(batch, iou_thr: float, plus_one: bool, phrase: bool, use_masks: bool, overlaps: bool = False):
    """``(first_hits, pair_ranks, end_bits)`` for the ranked lists of ``batch``.

    ``first_hits(pair_index, valid, predicate, list_valid, ends=None)``: the [B, G] first-hit rank of each GT
    relation in a list of (pair, predicate) entries [B, J] (``ends`` [B, J, 2]: the entries' (subject, object)
    when the caller has them, read instead of the pairs at ``pair_index`` with given predicates by the compiled
    ranker); ``predicate``: the entries' predicates [B, J], or None for the
    graph-constrained predicate of each entry's pair (its first maximal score column, looked up only for the
    entries whose pair matches both ends of some GT relation: the others hit nothing, whatever their predicate);
    ``list_valid``: entries that count as list positions (None: all). Phrase detection matches the union boxes
    of each entry's pair; otherwise matched objects are bit sets (computed by the compiled kernels on the CPU
    when they are built, :func:`_compiled_first_hit_ranker`). ``pair_ranks(order, valid)``: the first position
    whose pair matches both ends of each GT relation, whatever the predicate (None for ``phrase``).
    ``end_bits``: ``(subject_bits, object_bits)`` [B, N, W], the GT relations whose subject / object each predicted
    object matches (:func:`~.matching.relation_end_bits`; None for ``phrase``). The compiled ranker's ``first_hits``
    also has ``pair_flags()``: ``(scored, listed)`` [B, G] bool over every pair of each image in one pass
    (:func:`~.error_causes.error_analysis_rows`), and with ``overlaps`` (the error analysis asks) ``overlaps``: the
    error analysis' overlap flags from the same pass over the object pairs as the matching
    (:func:`_compiled_first_hit_ranker`)."""
    scores = batch.scores
    gt_sub, gt_obj = batch.gt_pairs[..., 0], batch.gt_pairs[..., 1]
    num_gt = batch.gt_predicates.shape[1]
    if phrase:
        def phrase_hits(pair_index: Tensor, valid: Tensor, predicate, list_valid: Optional[Tensor],
                    ends: Optional[Tensor] = None) -> Tensor:
            pairs = batch.rel_pairs.gather(1, pair_index[..., None].expand(-1, -1, 2))
            if predicate is None:
                predicate = scores.predicate_at(pair_index, valid)
            hits = triplet_hits(pairs[..., 0], pairs[..., 1], predicate, valid, batch.pred_labels, gt_sub, gt_obj,
                                batch.gt_predicates, batch.gt_valid, batch.gt_labels, iou_thr,
                                pred_boxes=batch.pred_boxes, gt_boxes=batch.gt_boxes, phrase=True, plus_one=plus_one)
            return first_hit_rank(hits, list_valid)
        return phrase_hits, None, None
    if not use_masks:
        ranker = _compiled_first_hit_ranker(batch, iou_thr, plus_one, overlaps)
        if ranker is not None:
            return ranker
    # the match list (sparse), or the matrix where the host must not wait (no list to size)
    matches = object_match_matrix(batch, iou_thr, plus_one, use_masks) if sync_free(batch.device) else \
        object_match_list(batch, iou_thr, plus_one, use_masks)
    subject_bits, object_bits = relation_end_bits(matches, gt_sub, gt_obj, batch.gt_valid)
    carries = predicate_bits(batch.gt_predicates, batch.gt_valid, scores.num_predicates)

    def ends_of(pair_index: Tensor, valid: Tensor) -> Tensor:
        return pair_end_bits(subject_bits, object_bits, batch.rel_pairs[..., 0].gather(1, pair_index),
                             batch.rel_pairs[..., 1].gather(1, pair_index), valid)

    def first_hits(pair_index: Tensor, valid: Tensor, predicate: Optional[Tensor],
                   list_valid: Optional[Tensor], listed_ends: Optional[Tensor] = None) -> Tensor:
        ends = ends_of(pair_index, valid)
        if predicate is None:
            valid = (ends != 0).any(-1)
            predicate = scores.predicate_at(pair_index, valid)
        return first_hit_rank_bits(predicate_hit_bits(ends, carries, predicate, valid), num_gt, list_valid)

    return first_hits, lambda order, valid: first_hit_rank_bits(ends_of(order, valid), num_gt, None), \
        (subject_bits, object_bits)


def _compiled_first_hit_ranker(batch, iou_thr: float, plus_one: bool, overlaps: bool = False):
    """:func:`_first_hit_ranker` of box matching by the compiled kernels (the same bit sets and ranks, image by
    image, reading each looked-up score row in place), or None where they do not apply (not built or switched
    off, not on the CPU, or score rows the kernels cannot address: views of non-contiguous inputs). With
    ``overlaps`` (and ``iou_thr`` > 0) the matching pass also gives the error analysis' overlaps
    (``box_match_overlap_flags``): ``first_hits.overlaps`` = ``((located subject bits, located object bits)
    [B, N, W], cause code before the pairs [B, G] int8, (valid GT objects, overlapped, matched) [B] int32)``
    (:func:`~.error_causes.error_analysis_rows`)."""
    kernels = compiled.kernels()
    source = _score_row_source(batch.scores) if kernels is not None and batch.device.type == 'cpu' else None
    if source is None:
        return None
    matrices, start, column = source
    scores = batch.scores
    gt_valid = batch.gt_valid
    found = None  # the error analysis' overlaps, from the matching's own pass
    if overlaps and iou_thr > 0 and hasattr(kernels, 'box_match_overlap_flags'):
        subject_bits, object_bits, loc_subject, loc_object, pre_cause, *counts = kernels.box_match_overlap_flags(
            batch.pred_boxes.float(), batch.pred_labels, batch.gt_boxes.float(), batch.gt_labels, batch.gt_pairs,
            gt_valid, float(iou_thr), bool(plus_one), list(OVERLAP_CAUSES))
        found = ((loc_subject, loc_object), pre_cause, tuple(counts))
    else:
        subject_bits, object_bits = kernels.box_relation_end_bits(
            batch.pred_boxes.float(), batch.pred_labels, batch.gt_boxes.float(), batch.gt_labels, batch.gt_pairs,
            gt_valid, float(iou_thr), bool(plus_one))
    num_pred = scores.num_predicates
    pair_rows = batch.pair_rows

    def first_hits(pair_index: Tensor, valid: Tensor, predicate: Optional[Tensor],
                   list_valid: Optional[Tensor], ends: Optional[Tensor] = None) -> Tensor:
        if ends is not None and predicate is not None:  # the entries' own (subject, object): no pair lookup
            positions = torch.arange(ends.shape[1], device=ends.device).expand(ends.shape[0], -1).contiguous()
            return kernels.first_hit_ranks(subject_bits, object_bits, batch.gt_predicates, gt_valid, [ends],
                                           positions, valid, predicate, list_valid, matrices, start, column,
                                           num_pred, False)
        return kernels.first_hit_ranks(subject_bits, object_bits, batch.gt_predicates, gt_valid, pair_rows,
                                       pair_index, valid, predicate, list_valid, matrices, start, column, num_pred,
                                       False)

    def pair_ranks(order: Tensor, valid: Tensor) -> Tensor:
        return kernels.first_hit_ranks(subject_bits, object_bits, batch.gt_predicates, gt_valid, pair_rows,
                                       order, valid, None, None, [], None, 0, num_pred, True)

    if hasattr(kernels, 'relation_pair_flags'):  # one pass over every pair for the error analysis
        def pair_flags():  # the pairs as the ranking pass' 2-byte codes where it wrote them (not the int64 list)
            codes = getattr(getattr(batch, 'ranked_lists', None), 'pair_codes', None)
            return kernels.relation_pair_flags(subject_bits, object_bits, batch.gt_predicates, gt_valid, pair_rows,
                                               batch.num_rel_preds, matrices, start, column, num_pred, codes)
        first_hits.pair_flags = pair_flags
    if found is not None:
        first_hits.overlaps = found
    return first_hits, pair_ranks, (subject_bits, object_bits)


def _score_row_source(scores):
    """``(matrices, start, column)``: where the compiled first-hit kernel reads the score row of a pair (the
    compiled layout's inputs, or the stacked / concatenated copy as one matrix with its images' first rows
    ``start``; predicate columns from ``column``), or None for score rows it cannot address in place."""
    if scores.sources is not None:
        return scores.sources, None, scores.column
    flat, num_pred = scores.flat, scores.num_predicates
    if flat is None or flat.dtype != torch.float32 or flat.dim() != 2 or num_pred <= 0 or scores.start is None:
        return None
    if not flat.shape[0]:
        return [flat.new_zeros((0, num_pred))], scores.start, 0
    column = flat.stride(0) - num_pred  # a view of a copy that kept its background column first
    if column < 0 or (flat.stride(1) != 1 and num_pred > 1) or flat.storage_offset() < column:
        return None
    width = column + num_pred
    return [flat.as_strided((flat.shape[0], width), (width, 1), flat.storage_offset() - column)], scores.start, column


def _list_head(batch, gc_order: Tensor, gc_valid: Tensor, gc_score: Tensor, list_length: int,
               pair_ranks, gc_predicate: Optional[Tensor] = None) -> Dict[str, Tensor]:
    """The per-image outputs of :func:`scene_graph_ranks` (``list_length`` > 0): the head of the
    graph-constrained list and, per GT relation, ``pair_rank`` / ``pair_predicate`` (``pair_ranks`` None:
    phrase detection, no pair ranks). ``gc_predicate``: the listed pairs' predicates when known."""
    scores = batch.scores

    def predicates(position: Tensor, valid: Tensor) -> Tensor:  # of the entries at list positions (valid ones)
        if not gc_order.shape[1]:  # an empty list: nothing is valid
            return torch.zeros_like(position)
        if gc_predicate is not None:
            return gc_predicate.gather(1, position)
        return scores.predicate_at(gc_order.gather(1, position), valid)

    length = min(int(list_length), gc_order.shape[1])
    head, head_valid = gc_order[:, :length], gc_valid[:, :length]
    positions = torch.arange(length, device=gc_order.device).expand(gc_order.shape[0], length)
    out = {'gc_pairs': head, 'gc_valid': head_valid,
           'gc_predicate': torch.where(head_valid, predicates(positions, head_valid), -1),
           'gc_score': torch.where(head_valid, gc_score.gather(1, head), 0.0)}
    if pair_ranks is None:
        out['pair_rank'] = torch.full_like(batch.gt_predicates, NO_HIT, dtype=torch.int32)
    else:
        out['pair_rank'] = pair_ranks(gc_order, gc_valid)
    found = out['pair_rank'] < NO_HIT
    at = torch.where(found, out['pair_rank'], 0).long()
    out['pair_predicate'] = torch.where(found, predicates(at, found), -1)
    return out

