"""Per-GT-relation statistics for all K at once, and their aggregation into R@K / mR@K.

``scene_graph_ranks`` turns a padded batch into, for each GT relation, the 0-based position of the first
prediction that hits it in each ranked list (graph-constrained, no-graph-constraint, GT-pair sub-list).
"hit within the top K" is then ``rank < K`` for every K, so one pass serves all K and all metrics, and the
per-image state is a few integers per GT relation, independent of the number of predictions.
"""
from typing import Dict, Optional, Sequence

import torch
from torch import Tensor

from .boxes import box_iou, mask_iou
from .limits import PAIR_KEY_BASE
from .matching import (box_object_matches, first_hit_rank, ranked_list_hits, relation_end_matches, same_class_matrix,
                       triplet_hits)
from .ranking import stable_topk, triplet_scores


def _take(values: Tensor, index: Tensor) -> Tensor:
    return values.gather(1, index)


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


def object_match_matrix(batch, iou_thr: float, plus_one: bool, use_masks: bool) -> Tensor:
    """[B, N, M] bool: predicted object n matches GT object m (same class, box or mask IoU >= ``iou_thr``)."""
    if not use_masks:
        return box_object_matches(batch.pred_boxes, batch.pred_labels, batch.gt_boxes, batch.gt_labels, iou_thr,
                                  plus_one)
    return same_class_matrix(batch.pred_labels, batch.gt_labels) & \
        (object_iou_matrix(batch, plus_one, use_masks=True) >= iou_thr)


def no_graph_constraint_list(scores, rel_valid: Tensor, ng_topk: int, pair_score: Tensor):
    """Exact stable top-``ng_topk`` of all (pair, predicate) scores ``pair_score * prob`` of every image.

    ``scores``: the batch's :class:`~mmsgg_eval.functional.scores.RelationScores`; ``rel_valid`` [B, R] the
    real pairs; ``pair_score`` [B, R] subject score x object score (non-negative).
    Only pairs whose best entry reaches the ``ng_topk``-th best pair can contribute (an entry below that
    threshold has ``ng_topk`` strictly larger best-entries above it), so the score matrices are pruned to
    those candidate pairs before ranking; ties at the threshold are all kept, and candidates keep their
    row-major order, so the result equals a stable sort of the full matrix.
    Returns ``(pair index [B, L], predicate [B, L], valid [B, L])``.
    """
    num_pred = scores.num_predicates
    if scores.dense is not None:
        # every image has the same pairs count (fixed top-K outputs): rank the whole [B, R * P] matrix at once
        ranked = scores.dense * pair_score[..., None]
        valid = (scores.dense != float('-inf')).flatten(1) if scores.has_single_label else None
        flat_order, flat_valid = stable_topk(ranked.flatten(1), valid, ng_topk)
        return flat_order // max(num_pred, 1), flat_order % max(num_pred, 1), flat_valid
    best = pair_score * scores.best  # == max over p of pair_score * prob_p (rounding is monotone)
    order, valid = stable_topk(best, rel_valid, ng_topk)
    inf = torch.tensor(float('inf'), device=best.device)
    kth = torch.where(valid, best.gather(1, order), inf).amin(dim=1, keepdim=True) if order.shape[1] \
        else best.new_full((best.shape[0], 1), float('-inf'))
    enough = valid.sum(1, keepdim=True) >= ng_topk  # fewer valid pairs: every pair is a candidate
    threshold = torch.where(enough, kth, -inf)
    candidate = rel_valid & (best >= threshold)
    image, pos = candidate.nonzero(as_tuple=True)  # row-major: image, then pair order
    raw = scores.rows(image, pos)
    counts = torch.bincount(image, minlength=best.shape[0])
    width = int(counts.max()) if pos.numel() else 0
    slot = torch.arange(pos.numel(), device=pos.device) - (torch.cumsum(counts, 0) - counts)[image]
    entry_scores = raw * pair_score[image, pos][:, None]
    cand_scores = entry_scores.new_full((best.shape[0], width, num_pred), float('-inf'))
    cand_scores[image, slot] = entry_scores
    cand_valid = torch.zeros_like(cand_scores, dtype=torch.bool)
    cand_valid[image, slot] = raw != float('-inf')
    cand_pair = torch.zeros((best.shape[0], width), dtype=torch.long, device=pos.device)
    cand_pair[image, slot] = pos
    flat_order, flat_valid = stable_topk(cand_scores.flatten(1), cand_valid.flatten(1), ng_topk)
    if num_pred == 0:
        return flat_order, flat_order, flat_valid
    return cand_pair.gather(1, flat_order // num_pred), flat_order % num_pred, flat_valid


def scene_graph_ranks(batch, max_k: int, ng_topk: int, iou_thr: float = 0.5, plus_one: bool = False,
                      phrase: bool = False, use_masks: bool = False, rank_by: str = 'score',
                      with_pair_accuracy: bool = True) -> Dict[str, Tensor]:
    """First-hit ranks of every GT relation in the ranked lists of a :class:`SceneGraphBatch`.

    Returns ``{'gc': [B, G], 'ngc': [B, G], 'pair_acc': [B, G] (if asked)}`` int32; a GT relation not hit
    within a list has rank ``NO_HIT`` (2**30).
    ``rank_by='given'`` keeps the input order of the pairs for the graph-constrained list.
    """
    scores = batch.scores  # the predicate scores, in the layout the reader chose
    subject_score = _take(batch.pred_scores, batch.rel_pairs[..., 0])
    object_score = _take(batch.pred_scores, batch.rel_pairs[..., 1])
    gc_score = triplet_scores(scores.best, subject_score, object_score)
    gt_sub, gt_obj = batch.gt_pairs[..., 0], batch.gt_pairs[..., 1]
    if phrase:
        def list_hits(pair_index: Tensor, valid: Tensor, pred_of_entry: Tensor) -> Tensor:
            pairs = batch.rel_pairs.gather(1, pair_index[..., None].expand(-1, -1, 2))
            return triplet_hits(pairs[..., 0], pairs[..., 1], pred_of_entry, valid, batch.pred_labels,
                                gt_sub, gt_obj, batch.gt_predicates, batch.gt_valid, batch.gt_labels, iou_thr,
                                pred_boxes=batch.pred_boxes, gt_boxes=batch.gt_boxes, phrase=True,
                                plus_one=plus_one)
    else:
        subject_ok, object_ok = relation_end_matches(object_match_matrix(batch, iou_thr, plus_one, use_masks),
                                                     gt_sub, gt_obj, batch.gt_valid)

        def list_hits(pair_index: Tensor, valid: Tensor, pred_of_entry: Tensor) -> Tensor:
            return ranked_list_hits(subject_ok, object_ok, batch.rel_pairs[..., 0].gather(1, pair_index),
                                    batch.rel_pairs[..., 1].gather(1, pair_index), pred_of_entry, valid,
                                    batch.gt_predicates, scores.num_predicates)

    lists = []  # (name, pair index [B, J], entry valid [B, J], predicate [B, J], sub-list mask or None)
    if rank_by == 'given':
        length = min(max_k, batch.rel_valid.shape[1])
        gc_order = torch.arange(length, device=batch.device).expand(batch.rel_valid.shape[0], length)
        gc_valid = batch.rel_valid[:, :length]
    else:
        gc_order, gc_valid = stable_topk(gc_score, batch.rel_valid, max_k)
    lists.append(('gc', gc_order, gc_valid, scores.predicate_at(gc_order, gc_valid), None))

    pair_score = subject_score.float() * object_score.float()
    ng_pair, ng_pred, ng_valid = no_graph_constraint_list(scores, batch.rel_valid, ng_topk, pair_score)
    lists.append(('ngc', ng_pair, ng_valid, ng_pred, None))

    if with_pair_accuracy:
        # GC predictions whose (subject idx, object idx) is a GT pair, in ranked order (index equality)
        rel_key = batch.rel_pairs[..., 0] * PAIR_KEY_BASE + batch.rel_pairs[..., 1]
        gt_key = torch.where(batch.gt_valid, gt_sub * PAIR_KEY_BASE + gt_obj, torch.full_like(gt_sub, -1))
        in_gt = (rel_key[:, :, None] == gt_key[:, None, :]).any(-1) & batch.rel_valid
        if rank_by == 'given':
            order = torch.arange(in_gt.shape[1], device=batch.device).expand_as(in_gt)
            # the sub-list positions are counted by first_hit_rank through list_valid
            lists.append(('pair_acc', order, in_gt, scores.predicate_at(order, in_gt), in_gt))
        else:
            acc_order, acc_valid = stable_topk(gc_score, in_gt, max_k)
            lists.append(('pair_acc', acc_order, acc_valid, scores.predicate_at(acc_order, acc_valid), None))

    # one hit matrix for all lists side by side, then each list's first hit
    hits = list_hits(torch.cat([entry[1] for entry in lists], 1), torch.cat([entry[2] for entry in lists], 1),
                     torch.cat([entry[3] for entry in lists], 1))
    out, start = {}, 0
    for name, pair_index, _, _, list_valid in lists:
        out[name] = first_hit_rank(hits[:, start:start + pair_index.shape[1]], list_valid)
        start += pair_index.shape[1]
    return out


def triplet_keys(subject_class: Tensor, object_class: Tensor, predicate: Tensor, num_classes: int,
                 num_predicates: int) -> Tensor:
    """Integer code of (subject class, object class, predicate) triplets (all 0-based)."""
    return (subject_class.long() * num_classes + object_class.long()) * num_predicates + predicate.long()


def recall_from_ranks(rank: Tensor, image_of_rel: Tensor, num_images: int, ks: Sequence[int],
                      rel_mask: Optional[Tensor] = None, average: str = 'image') -> Tensor:
    """R@K per K (fraction, float64) from per-GT first-hit ranks.

    ``image_of_rel`` maps each GT relation to its (evaluated) image 0..num_images-1. With ``rel_mask``
    only those relations count, and images with none of them are left out (zero-shot recall).
    ``average='image'``: mean over images of hits/n; ``'micro'``: total hits / total GT.
    """
    if rel_mask is None:
        rel_mask = torch.ones_like(rank, dtype=torch.bool)
    count = torch.bincount(image_of_rel[rel_mask], minlength=num_images).double()
    has = count > 0
    results = []
    for k in ks:
        hit = (rank < k) & rel_mask
        hits = torch.bincount(image_of_rel[hit], minlength=num_images).double()
        if average == 'micro':
            results.append(hits.sum() / count.sum() if count.sum() > 0 else hits.new_zeros(()))
        else:
            results.append((hits[has] / count[has]).mean() if has.any() else hits.new_zeros(()))
    return torch.stack(results) if results else torch.zeros(0, dtype=torch.float64)


def per_predicate_recall(rank: Tensor, predicate: Tensor, image_of_rel: Tensor, num_images: int,
                         num_predicates: int, ks: Sequence[int], average: str = 'image'):
    """Per-predicate recall [len(ks), P] (float64) and presence mask [P].

    ``'image'`` (legacy mR): for predicate p, mean over the images containing p of hits_p / count_p.
    ``'micro'``: total hits of p / total GT of p.
    """
    key = image_of_rel * num_predicates + predicate
    size = num_images * num_predicates
    count = torch.bincount(key, minlength=size).double().view(num_images, num_predicates)
    present_images = count > 0
    present = present_images.any(0)
    rows = []
    for k in ks:
        hits = torch.bincount(key[rank < k], minlength=size).double().view(num_images, num_predicates)
        if average == 'micro':
            rows.append(torch.where(present, hits.sum(0) / count.sum(0).clamp(min=1), torch.zeros_like(hits[0])))
        else:
            ratio = torch.where(present_images, hits / count.clamp(min=1), torch.zeros_like(hits))
            n_img = present_images.sum(0).double()
            rows.append(torch.where(present, ratio.sum(0) / n_img.clamp(min=1), torch.zeros_like(n_img)))
    recall = torch.stack(rows) if rows else torch.zeros((0, num_predicates), dtype=torch.float64)
    return recall, present
