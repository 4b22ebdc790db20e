"""Per-GT-relation statistics for all K at once, and their aggregation into R@K / mR@K.

``scene_graph_ranks`` turns a padded batch into, for each GT relation, the 0-based position of the first
prediction that hits it in each ranked list (graph-constrained, no-graph-constraint, GT-pair sub-list).
"hit within the top K" is then ``rank < K`` for every K, so one pass serves all K and all metrics, and the
per-image state is a few integers per GT relation, independent of the number of predictions.
"""
from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch import Tensor

from . import compiled
from .boxes import box_iou, mask_iou
from .diagnostics import HEAD_ENTRIES
from .limits import NO_HIT
from .transfer import sync_free
from .matching import (ObjectMatches, box_object_match_list, box_object_matches, first_hit_rank, first_hit_rank_bits,
                       gt_pair_sublist, pair_end_bits, predicate_bits, predicate_hit_bits, relation_end_bits,
                       same_class_matrix, triplet_hits)
from .ranking import (graph_constrained_ranking, positions_in_groups, sortable_key, stable_topk,
                      valid_counts)

# the stacked layout ranks all entries of an image at once up to this many (pair, predicate) entries
DENSE_NGC_ENTRIES = 8192
# the second (probe) bound of the no-graph-constraint threshold is computed for the images with fewer pairs than
# this many times ``ng_topk``: there most of an image's pairs are among its top pairs and only the probe bound is
# tight; with more pairs (e.g. 300-1,000 candidates, SGDet with all pairs) the top pairs' own bound lets about as
# few rows through and the probe costs more than it saves
NGC_PROBE_PAIRS_PER_ENTRY = 2


def object_iou_matrix(batch, plus_one: bool, use_masks: bool) -> Tensor:
    """IoU between predicted and GT objects of every image: [B, N, M] (boxes, or masks when asked)."""
    if not use_masks:
        return box_iou(batch.pred_boxes, batch.gt_boxes, plus_one)
    num_pred, num_gt = batch.pred_boxes.shape[1], batch.gt_boxes.shape[1]
    out = batch.pred_boxes.new_zeros((len(batch.pred_masks), num_pred, num_gt))
    for i, (pm, gm) in enumerate(zip(batch.pred_masks, batch.gt_masks)):
        if pm.shape[-2:] != gm.shape[-2:]:
            raise ValueError(f'sample_idx={int(batch.sample_idx[i])}: predicted masks {list(pm.shape[-2:])} and '
                             f'GT masks {list(gm.shape[-2:])} differ in size (masks must be in the original frame)')
        out[i, :pm.shape[0], :gm.shape[0]] = mask_iou(pm, gm)
    return out


def object_match_list(batch, iou_thr: float, plus_one: bool, use_masks: bool) -> ObjectMatches:
    """The (predicted object, GT object) pairs of every image that match (same class, box or mask IoU >=
    ``iou_thr``)."""
    if not use_masks:
        return box_object_match_list(batch.pred_boxes, batch.pred_labels, batch.gt_boxes, batch.gt_labels, iou_thr,
                                     plus_one)
    return ObjectMatches.from_matrix(object_match_matrix(batch, iou_thr, plus_one, use_masks))


def object_match_matrix(batch, iou_thr: float, plus_one: bool, use_masks: bool) -> Tensor:
    """[B, N, M] bool: predicted object n matches GT object m (same class, box or mask IoU >= ``iou_thr``)."""
    if not use_masks:
        return box_object_matches(batch.pred_boxes, batch.pred_labels, batch.gt_boxes, batch.gt_labels, iou_thr,
                                  plus_one)
    return same_class_matrix(batch.pred_labels, batch.gt_labels) & \
        (object_iou_matrix(batch, plus_one, use_masks=True) >= iou_thr)


def _entry_threshold(scores, pair_score: Tensor, best: Tensor, rel_count: Tensor, top_pairs: Tensor,
                     top_valid: Tensor, ng_topk: int) -> Tensor:
    """[B] lower bound of each image's ``ng_topk``-th best entry from some of its pairs ``top_pairs`` [B, L]
    (any distinct pairs give a bound; high-ranked ones a tight one), the larger of:

    * the smallest best entry ``best`` of the first ``ng_topk`` valid pairs (each has an entry that large);
    * the ``ng_topk``-th best entry among all entries of the first m = ceil(10 * ``ng_topk`` / P) pairs
      (only for the images with fewer than ``NGC_PROBE_PAIRS_PER_ENTRY * ng_topk`` pairs, ``rel_count``).

    -inf where the pairs given are too few for both.
    """
    batch, width = best.shape
    num_pred = scores.num_predicates
    minus_inf = best.new_full((batch,), float('-inf'))
    head, head_valid = top_pairs[:, :ng_topk], top_valid[:, :ng_topk]
    pair_bound = torch.where(head_valid, best.gather(1, head), best.new_full((), float('inf'))).amin(dim=1) \
        if head.shape[1] else minus_inf
    threshold = torch.where(head_valid.sum(1) >= ng_topk, pair_bound, minus_inf)
    m = min(-(-10 * ng_topk // num_pred), top_pairs.shape[1])
    if m * num_pred < ng_topk:
        return threshold
    probed = (rel_count < NGC_PROBE_PAIRS_PER_ENTRY * ng_topk).nonzero().squeeze(1)  # ascending
    if not probed.numel():
        return threshold
    slot = top_valid[:, :m].index_select(0, probed).reshape(-1).nonzero().squeeze(1)  # i * m + j: probed image i
    image = probed.index_select(0, slot // m)
    probe = top_pairs[:, :m].index_select(0, probed).reshape(-1).index_select(0, slot)
    rows = scores.rows(image, probe)
    entries = rows * pair_score.reshape(-1).index_select(0, image * width + probe)[:, None]
    if scores.has_single_label:  # -inf marks a non-candidate (and -inf * 0 is NaN)
        entries = torch.where(rows == float('-inf'), rows, entries)
    table = entries.new_full((probed.numel() * m, num_pred), float('-inf')).index_copy_(0, slot, entries)
    bound = table.view(probed.numel(), -1).topk(ng_topk, dim=1, sorted=False).values.amin(dim=1)
    return threshold.index_copy(0, probed, torch.maximum(threshold.index_select(0, probed), bound))


def no_graph_constraint_list(scores, rel_valid: Tensor, ng_topk: int, pair_score: Tensor,
                             top_pairs: Optional[Tensor] = None, top_valid: Optional[Tensor] = None,
                             rel_count: Optional[Tensor] = None):
    """Exact stable top-``ng_topk`` of all (pair, predicate) scores ``pair_score * prob`` of every image.

    ``scores``: the batch's :class:`~mmsgg_eval.functional.scores.RelationScores`; ``rel_valid`` [B, R] the
    real pairs; ``pair_score`` [B, R] subject score x object score (non-negative). ``top_pairs`` [B, L] (with
    ``top_valid``): distinct pairs the caller ranked high (e.g. the graph-constrained list), which bound the
    ``ng_topk``-th best entry of each image from below; by default the ``ng_topk`` pairs of highest best entry.
    ``rel_count`` [B]: the number of real pairs of each image, when the caller has it.

    Only entries reaching that bound can be in the list: they are picked from the rows of the pairs whose best
    entry reaches it and ranked alone. Ties at the bound are all kept and entries keep their row-major
    (pair, predicate) order, so the result equals a stable sort of the full matrix. In the ``compiled`` layout
    the kernel bounds each image's list from ``top_pairs`` too (or from its rows' best entries), and an image's
    real pairs are the rows of its matrix (``rel_valid`` must mark them, as the reader's batches do).
    Returns ``(pair index [B, L], predicate [B, L], valid [B, L])``, L <= ``ng_topk``.
    """
    num_pred = scores.num_predicates
    batch, num_rel = rel_valid.shape
    device = rel_valid.device
    if scores.dense is not None and num_rel * num_pred <= DENSE_NGC_ENTRIES:
        # fixed-size outputs with few entries per image: rank the whole [B, R * P] matrix at once
        ranked = scores.dense * pair_score[..., None]
        valid = (scores.dense != float('-inf')).flatten(1) if scores.has_single_label else None
        flat_order, flat_valid = stable_topk(ranked.flatten(1), valid, ng_topk)
        return flat_order // max(num_pred, 1), flat_order % max(num_pred, 1), flat_valid
    empty = torch.zeros((batch, 0), dtype=torch.long, device=device)
    if batch == 0 or num_rel == 0 or num_pred == 0 or ng_topk <= 0:
        return empty, empty, empty.bool()
    if scores.layout == 'compiled':  # every image's entries ranked in place (its real pairs: its matrix's rows)
        top = None if top_pairs is None else torch.where(top_valid, top_pairs, -1)  # distinct pairs, -1: none
        return compiled.kernels().no_graph_constraint_list(scores.sources, scores.column, num_pred, scores.best,
                                                           pair_score.float(), ng_topk, top)
    best = pair_score * scores.best  # == max over p of pair_score * prob_p (rounding is monotone)
    if rel_count is None:
        rel_count = valid_counts(rel_valid)
    if top_pairs is None:
        top_pairs, top_valid = stable_topk(best, rel_valid, ng_topk, rel_count)
    threshold = _entry_threshold(scores, pair_score, best, rel_count, top_pairs, top_valid, ng_topk)  # [B]
    pair_flat = (rel_valid & (best >= threshold[:, None])).view(-1).nonzero().squeeze(1)  # row-major
    image, pos = pair_flat // num_rel, pair_flat % num_rel
    rows = scores.rows(image, pos)  # [n, P]
    entries = rows * pair_score.reshape(-1).index_select(0, pair_flat)[:, None]
    keep = entries >= threshold.index_select(0, image)[:, None]
    if scores.has_single_label:
        keep &= rows != float('-inf')  # not a candidate of a single-label row
    entry_flat = keep.view(-1).nonzero().squeeze(1)  # row-major: image, pair order, predicate
    if entry_flat.numel() == 0:
        return empty, empty, empty.bool()
    entry_image = image.index_select(0, entry_flat // num_pred)  # non-decreasing
    values = entries.view(-1).index_select(0, entry_flat)
    which, valid = _ranked_entries(entry_image, entry_flat, values, batch, ng_topk)  # row * P + predicate
    return pos.index_select(0, (which // num_pred).view(-1)).view_as(which), which % num_pred, valid


# the kept entries of a batch are ranked in a [B, most kept by an image] table up to this many times their
# number (else, for very uneven images, by one sort of them all)
RANK_TABLE_SLACK = 4


def _ranked_entries(entry_image: Tensor, entry: Tensor, values: Tensor, batch: int, ng_topk: int):
    """The first ``ng_topk`` of each image's kept entries by descending value, ties in their given order:
    ``(entry [B, L], valid [B, L])``, L = min(``ng_topk``, most entries of an image). ``entry_image`` [n]
    non-decreasing, ``entry`` [n] what to return for each, ``values`` [n] finite and >= 0 (so that their keys
    fit 31 bits)."""
    device = entry.device
    # (bincount would read the largest image index on the host first: the counts are added instead)
    counts = torch.zeros(batch, dtype=torch.long, device=device).index_add_(0, entry_image, torch.ones_like(entry_image))
    most = int(counts.max())
    width = min(most, ng_topk)
    first, slot = positions_in_groups(entry_image, counts)  # slot: the entry's place among its image's entries
    score_key = sortable_key(values)
    if batch * most <= RANK_TABLE_SLACK * entry.numel():
        # unique keys (value bits, then earlier first): one top-k per image row of a table, -1 below every key
        table = torch.full((batch * most,), -1, dtype=torch.long, device=device)
        table.index_copy_(0, entry_image * most + slot, (score_key << 32) + (most - 1 - slot))
        top, at = table.view(batch, most).topk(width, dim=1, sorted=True)
        valid = top >= 0
        picked = (first[:, None] + at).clamp(max=entry.numel() - 1)
        return torch.where(valid, entry.index_select(0, picked.view(-1)).view(batch, width), 0), valid
    # one stable sort of all entries by (image, descending value): ties keep the given order; the images stay
    # in their order, so the sorted entry at ``slot`` is the slot-th of its image
    order = torch.sort((entry_image << 32) + ((2 ** 31 - 1) - score_key), stable=True).indices
    listed = (slot < width).nonzero().squeeze(1)
    table_slot = entry_image.index_select(0, listed) * width + slot.index_select(0, listed)
    which = torch.zeros(batch * width, dtype=torch.long, device=device)
    which.index_copy_(0, table_slot, entry.index_select(0, order.index_select(0, listed)))
    valid = torch.zeros(batch * width, dtype=torch.bool, device=device).index_fill_(0, table_slot, True)
    return which.view(batch, width), valid.view(batch, width)


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
    first_hits, pair_ranks, end_bits = _first_hit_ranker(batch, iou_thr, plus_one, phrase, use_masks)

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


def _first_hit_ranker(batch, iou_thr: float, plus_one: bool, phrase: bool, use_masks: bool):
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
    (:func:`~.error_causes.error_analysis_rows`)."""
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
        ranker = _compiled_first_hit_ranker(batch, iou_thr, plus_one)
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


def _compiled_first_hit_ranker(batch, iou_thr: float, plus_one: bool):
    """:func:`_first_hit_ranker` of box matching by the compiled kernels (the same bit sets and ranks, image by
    image, reading each looked-up score row in place), or None where they do not apply (not built or switched
    off, not on the CPU, or score rows the kernels cannot address: views of non-contiguous inputs)."""
    kernels = compiled.kernels()
    source = _score_row_source(batch.scores) if kernels is not None and batch.device.type == 'cpu' else None
    if source is None:
        return None
    matrices, start, column = source
    scores = batch.scores
    gt_valid = batch.gt_valid
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
        def pair_flags():  # each pair's predicate from the ranking pass where it gave them (no second row read)
            given = getattr(getattr(batch, 'ranked_lists', None), 'pair_predicate', None)
            return kernels.relation_pair_flags(subject_bits, object_bits, batch.gt_predicates, gt_valid, pair_rows,
                                               batch.num_rel_preds, matrices, start, column, num_pred, given)
        first_hits.pair_flags = pair_flags
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


def triplet_keys(subject_class: Tensor, object_class: Tensor, predicate: Tensor, num_classes: int,
                 num_predicates: int) -> Tensor:
    """Integer code of (subject class, object class, predicate) triplets (all 0-based)."""
    return (subject_class.long() * num_classes + object_class.long()) * num_predicates + predicate.long()


def triplet_parts(codes: Tensor, num_classes: int, num_predicates: int):
    """(subject class, object class, predicate) of :func:`triplet_keys` codes (the inverse, all 0-based)."""
    codes = codes.long()
    return codes // num_predicates // num_classes, codes // num_predicates % num_classes, codes % num_predicates


def hits_per_k(rank: Tensor, key: Tensor, size: int, ks: Sequence[int]) -> Tensor:
    """[size, len(ks)] float64: for each key (0..size-1) and each K, the number of relations of that key with
    ``rank < K`` (:func:`hits_per_k_columns` side by side)."""
    columns = hits_per_k_columns(rank, key, size, ks)
    if not columns:
        return torch.zeros((size, 0), dtype=torch.float64, device=rank.device)
    return torch.stack(columns, dim=1)


def hits_per_k_columns(rank: Tensor, key: Tensor, size: int, ks: Sequence[int]) -> List[Tensor]:
    """:func:`hits_per_k` as one contiguous float64 [size] tensor per K (in the given order of ``ks``): one
    bincount of the keys of the relations hit within each K."""
    # a K above NO_HIT counts every hit and no miss, as K = NO_HIT does (ranks of hits are list positions)
    key = key.long()
    return [torch.bincount(key[rank < min(int(k), NO_HIT)], minlength=size).double() for k in ks]


def hit_within(rank: Tensor, k: int) -> Tensor:
    """[..] bool: first-hit ranks below K (misses, ``NO_HIT``, never count, whatever the K)."""
    return rank < min(int(k), NO_HIT)


def recall_from_ranks(rank: Tensor, image_of_rel: Tensor, num_images: int, ks: Sequence[int],
                      rel_mask: Optional[Tensor] = None, average: str = 'image', empty: float = 0.0) -> Tensor:
    """R@K per K (fraction, float64) from per-GT first-hit ranks.

    ``image_of_rel`` maps each GT relation to its (evaluated) image 0..num_images-1. With ``rel_mask``
    only those relations count, and images with none of them are left out (zero-shot recall).
    ``average='image'``: mean over images of hits/n; ``'micro'``: total hits / total GT. ``empty``: the value
    when no relation counts (0 for the whole evaluation, NaN for a subset: :data:`NO_VALUE`).
    """
    if not len(ks):
        return torch.zeros(0, dtype=torch.float64)
    if rel_mask is not None:
        rank, image_of_rel = rank[rel_mask], image_of_rel[rel_mask]
    count = torch.bincount(image_of_rel, minlength=num_images).double()
    has = count > 0
    results = []
    for hits in hits_per_k_columns(rank, image_of_rel, num_images, ks):  # each K's sums over contiguous [I]
        if average == 'micro':
            results.append(hits.sum() / count.sum() if count.sum() > 0 else hits.new_full((), empty))
        else:
            results.append((hits[has] / count[has]).mean() if has.any() else hits.new_full((), empty))
    return torch.stack(results)


#: The value of a key whose relations, predicates or images do not exist in the evaluation (a subset, group or
#: family without any GT relation): NaN, never a measured-looking 0 (reports show ``–`` and say why).
NO_VALUE = float('nan')


def mean_recall(per_predicate: Tensor, present: Tensor, members: Sequence[int], mr_average: str,
                empty: float = NO_VALUE) -> Tensor:
    """[K] mean of the per-predicate recalls ``per_predicate`` [K, P] over ``members``: over all of them
    (``mr_average='all'``, the legacy denominator: a member without GT counts 0) or over those ``present``
    [P] (``'present'``). ``empty`` when no member has a GT relation (NaN for a group or subset; the whole
    evaluation passes 0, its documented value when nothing was evaluated). The one mR rule of the metrics and
    the HTML report."""
    idx = torch.as_tensor(list(members), dtype=torch.long)
    held = idx[present[idx]] if idx.numel() else idx
    if held.numel() == 0:
        return torch.full((per_predicate.shape[0],), empty, dtype=torch.float64)
    if mr_average == 'present':
        idx = held
    return per_predicate[:, idx].sum(1) / idx.numel()


def per_predicate_recall(rank: Tensor, predicate: Tensor, image_of_rel: Tensor, num_images: int,
                         num_predicates: int, ks: Sequence[int], average: str = 'image'):
    """Per-predicate recall [len(ks), P] (float64) and presence mask [P].

    ``'image'`` (legacy mR): for predicate p, mean over the images containing p of hits_p / count_p.
    ``'micro'``: total hits of p / total GT of p.
    """
    key = image_of_rel * num_predicates + predicate
    size = num_images * num_predicates
    count = torch.bincount(key, minlength=size).double().view(num_images, num_predicates)
    n_img = (count > 0).sum(0).double()  # images containing each predicate
    present = n_img > 0
    if not len(ks):
        return torch.zeros((0, num_predicates), dtype=torch.float64), present
    rows = []
    divisor = count.clamp(min=1)
    for column in hits_per_k_columns(rank, key, size, ks):  # each K's sums over contiguous [I, P] tables
        hits = column.view(num_images, num_predicates)
        if average == 'micro':
            rows.append(torch.where(present, hits.sum(0) / count.sum(0).clamp(min=1), torch.zeros_like(hits[0])))
        else:
            ratio = hits / divisor  # 0 / 1 = 0 where the image has no relation of the predicate (no hit either)
            rows.append(torch.where(present, ratio.sum(0) / n_img.clamp(min=1), torch.zeros_like(n_img)))
    return torch.stack(rows), present


def evaluated_image_rows(image_sample_idx: Tensor, evaluated: Tensor, rel_sample_idx: Tensor):
    """Map per-relation rows onto the evaluated images.

    ``image_sample_idx`` [I] and ``evaluated`` [I] bool: the images and which of them count;
    ``rel_sample_idx`` [G]: the image of every relation row. Returns ``(image_of [G'], keep [G], num_images)``:
    ``keep`` marks the rows of evaluated images, ``image_of`` numbers their image 0..num_images-1.
    """
    eval_idx = image_sample_idx[evaluated]
    num_images = int(eval_idx.numel())
    if not num_images:
        keep = torch.zeros_like(rel_sample_idx, dtype=torch.bool)
        return rel_sample_idx[keep], keep, 0
    sorted_idx, order = torch.sort(eval_idx)
    pos = torch.searchsorted(sorted_idx, rel_sample_idx).clamp(max=num_images - 1)
    keep = sorted_idx[pos] == rel_sample_idx
    return order[pos][keep], keep, num_images
