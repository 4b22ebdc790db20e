"""Instance-level matching (the sgbench protocol): each detection is assigned to at most one GT object, and
predicted triplets are compared with the GT triplets through that assignment.

Conventions (Lorenz et al., "A Review and Efficient Implementation of Scene Graph Generation Metrics", and
the ``sgbench`` 1.0.0 package):

* a detection is assigned to the GT object of highest IoU among the GT objects with its label, provided that
  IoU is ``>= iou_thr``; ties go to the lowest GT index; otherwise it is unassigned (-1). Several detections
  may be assigned to the same GT object.
* a predicted triplet (subject detection, object detection, predicate) becomes (assigned subject GT,
  assigned object GT, predicate); it hits the GT triplet with exactly those GT indices and predicate.
* GT triplets are de-duplicated (one per distinct (subject, object, predicate) index triplet); predicted
  triplets repeating an earlier (subject, object, predicate) index triplet are dropped before counting the
  first K.

All functions work on padded batches ``[B, ...]`` with validity masks, on any device; no MMEngine import.
"""
from typing import Tuple

import torch
from torch import Tensor

from .limits import NO_HIT


def assign_detections(iou: Tensor, pred_labels: Tensor, pred_valid: Tensor, gt_labels: Tensor, gt_valid: Tensor,
                      iou_thr: float = 0.5) -> Tensor:
    """GT index assigned to every detection: ``[B, N]`` int64, -1 when none.

    ``iou`` [B, N, M] (box or mask IoU, float); detection n takes the GT object of highest IoU among the valid
    GT objects with its label (first index on ties) when that IoU is ``>= iou_thr``.
    """
    same = (pred_labels[:, :, None] == gt_labels[:, None, :]) & gt_valid[:, None, :] & pred_valid[:, :, None]
    masked = torch.where(same, iou.float().nan_to_num(0.0), torch.full_like(iou, -1.0, dtype=torch.float32))
    if masked.shape[2] == 0:
        return torch.full(masked.shape[:2], -1, dtype=torch.long, device=iou.device)
    best, index = masked.max(dim=2)  # torch.max returns the first maximal index
    return torch.where(same.any(2) & (best >= iou_thr), index, torch.full_like(index, -1))


def first_occurrence(keys: Tensor, valid: Tensor) -> Tensor:
    """``[B, L]`` bool: entry j is valid and no valid entry before it in its row has the same key."""
    length = keys.shape[1]
    earlier = torch.ones(length, length, dtype=torch.bool, device=keys.device).tril(-1)  # [j, i]: i < j
    same = (keys[:, :, None] == keys[:, None, :]) & valid[:, None, :] & earlier
    return valid & ~same.any(2)


def deduplicate_gt_triplets(gt_sub: Tensor, gt_obj: Tensor, gt_pred: Tensor, gt_valid: Tensor,
                            base: int) -> Tensor:
    """``gt_valid`` with repeated (subject, object, predicate) GT triplets switched off (first one kept).

    ``base``: a bound above every index and predicate (keys are ``(s * base + o) * base + p``).
    """
    key = (gt_sub.long() * base + gt_obj.long()) * base + gt_pred.long()
    return first_occurrence(key, gt_valid)


def remapped_first_hits(assigned: Tensor, entry_sub: Tensor, entry_obj: Tensor, entry_pred: Tensor,
                        entry_valid: Tensor, gt_sub: Tensor, gt_obj: Tensor, gt_pred: Tensor, gt_valid: Tensor,
                        base: int) -> Tuple[Tensor, Tensor, Tensor]:
    """First-hit ranks of a ranked list under instance matching.

    ``assigned`` [B, N] from :func:`assign_detections`; ``entry_*`` [B, L] the ranked list (detection indices
    and predicate of each entry); ``gt_*`` [B, G] the GT triplets (``gt_valid`` already de-duplicated).
    Entries repeating an earlier (subject, object, predicate) index triplet are dropped and the others are
    numbered 0, 1, ... (their position in the de-duplicated list).

    Returns ``(triplet_rank [B, G], pair_rank [B, G], kept [B, L])`` int64 / bool: the position of the first
    kept entry whose remapped triplet (resp. remapped pair, predicate ignored) equals the GT one, NO_HIT if
    none; ``kept`` marks the entries that survive de-duplication.
    """
    key = (entry_sub.long() * base + entry_obj.long()) * base + entry_pred.long()
    kept = first_occurrence(key, entry_valid)
    position = torch.cumsum(kept.long(), dim=1) - 1
    sub_gt = assigned.gather(1, entry_sub.long().clamp(min=0))
    obj_gt = assigned.gather(1, entry_obj.long().clamp(min=0))
    pair_hit = (sub_gt[:, None, :] == gt_sub[:, :, None]) & (obj_gt[:, None, :] == gt_obj[:, :, None]) & \
        (sub_gt[:, None, :] >= 0) & (obj_gt[:, None, :] >= 0) & kept[:, None, :] & gt_valid[:, :, None]
    triplet_hit = pair_hit & (entry_pred[:, None, :] == gt_pred[:, :, None])
    no_hit = torch.full_like(position, NO_HIT)[:, None, :].expand_as(pair_hit)
    pos = position[:, None, :].expand_as(pair_hit)
    if pair_hit.shape[2] == 0:
        empty = torch.full(gt_sub.shape, NO_HIT, dtype=torch.long, device=gt_sub.device)
        return empty, empty.clone(), kept
    triplet_rank = torch.where(triplet_hit, pos, no_hit).amin(2)
    pair_rank = torch.where(pair_hit, pos, no_hit).amin(2)
    return triplet_rank, pair_rank, kept


def predicate_ranks(assigned: Tensor, entry_sub: Tensor, entry_obj: Tensor, entry_pred: Tensor,
                    entry_valid: Tensor, gt_sub: Tensor, gt_obj: Tensor, gt_pred: Tensor, gt_valid: Tensor,
                    base: int) -> Tensor:
    """PRank of every GT triplet in a (no-graph-constraint) ranked list: ``[B, G]`` int64, -1 if not found.

    Walking the list in order (entries repeating an earlier index triplet dropped, entries with an
    unassigned end skipped), each distinct remapped triplet gets the number of distinct remapped triplets of
    the same remapped pair seen before it. A GT triplet's PRank is that number for its own remapped triplet:
    the 0-based rank of the correct predicate among the predicates listed for the GT pair.
    """
    key = (entry_sub.long() * base + entry_obj.long()) * base + entry_pred.long()
    kept = first_occurrence(key, entry_valid)
    sub_gt = assigned.gather(1, entry_sub.long().clamp(min=0))
    obj_gt = assigned.gather(1, entry_obj.long().clamp(min=0))
    matched = kept & (sub_gt >= 0) & (obj_gt >= 0)
    remapped = (sub_gt * base + obj_gt) * base + entry_pred.long()
    distinct = first_occurrence(remapped, matched)  # first time each remapped triplet appears
    length = entry_sub.shape[1]
    if length == 0:
        return torch.full(gt_sub.shape, -1, dtype=torch.long, device=gt_sub.device)
    pair_hit = (sub_gt[:, None, :] == gt_sub[:, :, None]) & (obj_gt[:, None, :] == gt_obj[:, :, None]) & \
        gt_valid[:, :, None]
    hit = pair_hit & distinct[:, None, :] & (entry_pred[:, None, :] == gt_pred[:, :, None])
    idx = torch.arange(length, device=entry_sub.device)
    first = torch.where(hit, idx, torch.full_like(idx, length)).amin(2)  # [B, G]
    before = idx[None, None, :] < first[:, :, None]
    rank = (pair_hit & distinct[:, None, :] & before).sum(2)
    return torch.where(first < length, rank, torch.full_like(rank, -1))


def matched_instances(assigned: Tensor, num_gt: int) -> Tensor:
    """``[B, M]`` bool: GT object m has at least one detection assigned to it (for InstR)."""
    batch = assigned.shape[0]
    out = torch.zeros(batch, num_gt + 1, dtype=torch.bool, device=assigned.device)
    target = torch.where(assigned >= 0, assigned, torch.full_like(assigned, num_gt))
    out.scatter_(1, target, True)
    return out[:, :num_gt]
