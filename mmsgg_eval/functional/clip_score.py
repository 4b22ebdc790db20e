"""The tensor parts of RelCLIPScore-style metrics (``metrics/relclip.py`` holds the metric, the texts and the
encoder calls).

Per image of a padded scene-graph batch: which ranked relations count (:func:`counted_relations`: both boxes
matched to two different GT objects, one relation per ordered GT pair), the per-image scores with the
penalty for few relations (:func:`image_scores`, :func:`penalty_divisor`), the reference-guided harmonic mean
(:func:`harmonic_mean`), the GT relations a counted relation can be compared with
(:func:`reference_candidates`) and the size-ratio / distance quantities of the region breakdown
(:func:`region_quantities`, :func:`region_groups`). Boxes are xyxy in one pixel frame; no MMEngine, no state.
"""
from typing import Dict, Tuple

import torch
from torch import Tensor

from .boxes import box_iou
from .ranking import graph_constrained_list

__all__ = ['CLIP_SCORE_MODES', 'REGION_GROUPS', 'counted_relations', 'penalty_divisor', 'harmonic_mean',
           'image_scores', 'reference_candidates', 'region_quantities', 'region_groups']

#: Modes: 'sgdet' matches predicted boxes to GT boxes by IoU; in 'sgcls' / 'predcls' predicted object i IS GT
#: object i (the batch substituted the GT boxes).
CLIP_SCORE_MODES = ('predcls', 'sgcls', 'sgdet')
#: Region groups of the breakdown: size ratio below / at least its threshold, distance below / at least its own.
REGION_GROUPS = ('low_ratio', 'high_ratio', 'near', 'far')


def _gt_object_of(batch, mode: str, iou_thr: float) -> Tuple[Tensor, Tensor]:
    """(GT object [B, N] of each predicted object, whether it has one [B, N]): by identity in 'sgcls' /
    'predcls'; in 'sgdet' the GT box of highest continuous IoU (ties: the first), matched when >= ``iou_thr``."""
    num_pred, num_gt = batch.pred_boxes.shape[1], batch.gt_boxes.shape[1]
    if mode in ('predcls', 'sgcls'):  # predicted object i is GT object i
        gt_of = torch.arange(num_pred, device=batch.device).expand(batch.pred_boxes.shape[0], num_pred)
        return gt_of, batch.pred_labels >= 0
    if num_gt == 0:
        gt_of = torch.zeros(batch.pred_boxes.shape[:2], dtype=torch.long, device=batch.device)
        return gt_of, torch.zeros_like(gt_of, dtype=torch.bool)
    iou = box_iou(batch.pred_boxes, batch.gt_boxes)
    iou = iou.masked_fill((batch.gt_labels < 0)[:, None, :], -1.0)
    best, gt_of = iou.max(dim=-1)  # ties: the first GT box
    return gt_of, best >= iou_thr


def counted_relations(batch, topk: int, mode: str = 'sgdet', iou_thr: float = 0.5,
                      rank_by: str = 'score') -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The relations that count among the first ``topk`` of each image's graph-constrained ranked list
    (:func:`~mmsgg_eval.functional.ranking.graph_constrained_list`; ``rank_by`` 'score' or 'given').

    A listed relation counts when both its boxes have a GT object (:func:`_gt_object_of`), the two GT objects
    differ, and no better-ranked counted relation maps to the same ordered GT pair. Returns ``(counted [B, K]
    bool, order [B, K] pair index, predicate [B, K] 0-based, gt_sub [B, K], gt_obj [B, K])``: position j of
    image b is the j-th entry of its ranked list.
    """
    order, valid, _ = graph_constrained_list(batch, topk, rank_by, prefix=False)
    pairs = batch.rel_pairs.gather(1, order[..., None].expand(-1, -1, 2))
    gt_of, matched = _gt_object_of(batch, mode, iou_thr)
    gt_sub = gt_of.gather(1, pairs[..., 0])
    gt_obj = gt_of.gather(1, pairs[..., 1])
    ok = valid & matched.gather(1, pairs[..., 0]) & matched.gather(1, pairs[..., 1]) & (gt_sub != gt_obj)
    key = gt_sub * max(batch.gt_boxes.shape[1], batch.pred_boxes.shape[1], 1) + gt_obj
    length = key.shape[1]
    earlier = torch.ones(length, length, dtype=torch.bool, device=batch.device).tril(-1)
    dup = ((key[:, :, None] == key[:, None, :]) & ok[:, None, :] & earlier).any(-1)
    return ok & ~dup, order, batch.gc_predicate_at(order, valid), gt_sub, gt_obj


def penalty_divisor(p: Tensor, k: Tensor, alpha: float = 1e-5) -> Tensor:
    """D = max(log(max(p - k, 1)) + alpha, 1) (natural log), elementwise, float64."""
    diff = (p.double() - k.double()).clamp(min=1)
    return (torch.log(diff) + alpha).clamp(min=1)


def harmonic_mean(a: Tensor, b: Tensor) -> Tensor:
    """2ab / (a + b), 0 where a + b = 0."""
    total = a + b
    return torch.where(total > 0, 2 * a * b / total.clamp(min=1e-12), torch.zeros_like(total))


def image_scores(num_objects: Tensor, num_counted: Tensor, sum_score: Tensor, num_ref: Tensor, sum_ref: Tensor,
                 alpha: float = 1e-5, penalty: bool = True) -> Tuple[Tensor, Tensor, Tensor]:
    """Per-image (penalised score, mean score, mean reference score), float64, of images with m GT objects,
    k counted relations and the sums of their scores s and of their reference scores (over ``num_ref`` of them).

    mean(s) = sum / k (0 when k = 0); penalised = mean(s) / D with D = :func:`penalty_divisor` of
    p = m(m-1)/2 and k (``penalty=False``: mean(s)); reference = its sum / ``num_ref`` (0 when none).
    """
    m, k = num_objects.double(), num_counted.double()
    mean_s = torch.where(k > 0, sum_score / k.clamp(min=1), torch.zeros_like(k))
    n_ref = num_ref.double()
    ref = torch.where(n_ref > 0, sum_ref / n_ref.clamp(min=1), torch.zeros_like(k))
    rel = mean_s / penalty_divisor(m * (m - 1) / 2, k, alpha) if penalty else mean_s
    return rel, mean_s, ref


def reference_candidates(gt_pairs: Tensor, gt_valid: Tensor, gt_predicates: Tensor, gt_sub: Tensor, gt_obj: Tensor,
                         labels: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """The GT relations of each counted relation's GT pair.

    ``gt_pairs`` [R, G, 2], ``gt_valid`` / ``gt_predicates`` [R, G]: the GT relations of each relation's image;
    ``gt_sub`` / ``gt_obj`` [R] its GT pair; ``labels`` [R] its predicate (-1 = none). Returns
    ``(candidate [R, G] bool, has_ref [R], hit [R])``: hit = the predicate is one of the pair's GT predicates.
    """
    candidate = (gt_pairs[..., 0] == gt_sub[:, None]) & (gt_pairs[..., 1] == gt_obj[:, None]) & gt_valid
    hit = (candidate & (gt_predicates == labels[:, None])).any(1)
    return candidate, candidate.any(1), hit


def region_quantities(sub_boxes: Tensor, obj_boxes: Tensor, image_wh: Tensor) -> Tuple[Tensor, Tensor]:
    """Size ratio r and normalised centre distance d of box pairs (xyxy [R, 4], image (W, H) [R, 2]).

    r = min(A_s, A_o) / max(A_s, A_o) (A = (x2 - x1)(y2 - y1), continuous; 1 when both areas are 0);
    d = |c_s - c_o|_2 / sqrt(W^2 + H^2) with c the box centres. Both float32 [R].
    """
    def area(b: Tensor) -> Tensor:
        return (b[:, 2] - b[:, 0]).clamp(min=0) * (b[:, 3] - b[:, 1]).clamp(min=0)

    a_s, a_o = area(sub_boxes.float()), area(obj_boxes.float())
    big = torch.maximum(a_s, a_o)
    ratio = torch.where(big > 0, torch.minimum(a_s, a_o) / big.clamp(min=1e-12), torch.ones_like(big))
    centre = lambda b: (b[:, :2] + b[:, 2:]) / 2  # noqa: E731
    distance = (centre(sub_boxes.float()) - centre(obj_boxes.float())).norm(dim=1) / image_wh.float().norm(dim=1)
    return ratio, distance


def region_groups(ratio: Tensor, distance: Tensor, ratio_thr: float, distance_thr: float) -> Dict[str, Tensor]:
    """Membership [R] bool of each relation in the :data:`REGION_GROUPS` (r < / >= ``ratio_thr``,
    d < / >= ``distance_thr``)."""
    return {'low_ratio': ratio < ratio_thr, 'high_ratio': ratio >= ratio_thr,
            'near': distance < distance_thr, 'far': distance >= distance_thr}
