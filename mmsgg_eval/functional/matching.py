"""Many-to-many triplet matching (SPEC 2.2) and first-hit ranks, on padded batches.

A predicted triplet j hits GT relation g when subject class, predicate and object class are equal and both
the subject IoU and the object IoU are >= ``iou_thr`` (or, for phrase detection, the IoU of the union boxes).
No one-to-one assignment: one prediction may hit several GT relations and vice versa.
"""
from typing import Optional

import torch
from torch import Tensor

from .boxes import box_iou, union_boxes

NO_HIT = 2 ** 30  # rank of a GT relation that no prediction hits


def gather_pair_iou(object_iou: Tensor, pred_objects: Tensor, gt_objects: Tensor) -> Tensor:
    """IoU between predicted object ``pred_objects[b, j]`` and GT object ``gt_objects[b, g]``.

    ``object_iou`` [B, N, M] (pred objects x GT objects); returns [B, J, G].
    """
    num_gt_objects = object_iou.shape[-1]
    rows = object_iou.gather(1, pred_objects[..., None].expand(-1, -1, num_gt_objects))  # [B, J, M]
    return rows.gather(2, gt_objects[:, None, :].expand(-1, rows.shape[1], -1))


def triplet_hits(pred_subject: Tensor, pred_object: Tensor, pred_predicate: Tensor, pred_valid: Tensor,
                 pred_labels: Tensor, gt_subject: Tensor, gt_object: Tensor, gt_predicate: Tensor,
                 gt_valid: Tensor, gt_labels: Tensor, iou_thr: float,
                 object_iou: Optional[Tensor] = None, pred_boxes: Optional[Tensor] = None,
                 gt_boxes: Optional[Tensor] = None, phrase: bool = False, plus_one: bool = False) -> Tensor:
    """Hit matrix [B, J, G] between ranked predicted triplets and GT relations.

    Subject/object entries are object indices (into ``pred_labels`` [B, N] / ``gt_labels`` [B, M]),
    predicates are 0-based. ``object_iou`` [B, N, M] is required for box/mask matching; ``phrase=True``
    matches the union boxes instead (needs ``pred_boxes``/``gt_boxes``).
    """
    sub_label = pred_labels.gather(1, pred_subject)
    obj_label = pred_labels.gather(1, pred_object)
    gt_sub_label = gt_labels.gather(1, gt_subject)
    gt_obj_label = gt_labels.gather(1, gt_object)
    same = ((sub_label[:, :, None] == gt_sub_label[:, None, :])
            & (pred_predicate[:, :, None] == gt_predicate[:, None, :])
            & (obj_label[:, :, None] == gt_obj_label[:, None, :]))
    same &= pred_valid[:, :, None] & gt_valid[:, None, :]
    if phrase:
        def take(boxes: Tensor, index: Tensor) -> Tensor:
            return boxes.gather(1, index[..., None].expand(-1, -1, 4))
        pred_union = union_boxes(take(pred_boxes, pred_subject), take(pred_boxes, pred_object))
        gt_union = union_boxes(take(gt_boxes, gt_subject), take(gt_boxes, gt_object))
        return same & (box_iou(pred_union, gt_union, plus_one) >= iou_thr)
    sub_ok = gather_pair_iou(object_iou, pred_subject, gt_subject) >= iou_thr
    obj_ok = gather_pair_iou(object_iou, pred_object, gt_object) >= iou_thr
    return same & sub_ok & obj_ok


def first_hit_rank(hits: Tensor, list_valid: Optional[Tensor] = None) -> Tensor:
    """0-based position of the first prediction hitting each GT relation: [B, J, G] -> [B, G] int32.

    GT relations that no prediction hits get ``NO_HIT`` (2**30, larger than any K). ``list_valid`` [B, J] optionally
    restricts the list (e.g. the pair-accuracy sub-list); positions then count only kept entries.
    """
    batch, length, num_gt = hits.shape
    if list_valid is not None:
        hits = hits & list_valid[:, :, None]
        position = torch.cumsum(list_valid.int(), dim=1) - 1
    else:
        position = torch.arange(length, device=hits.device).expand(batch, length)
    if length == 0:
        return torch.full((batch, num_gt), NO_HIT, dtype=torch.int32, device=hits.device)
    sentinel = torch.full((), NO_HIT, dtype=torch.int32, device=hits.device)
    ranks = torch.where(hits, position[:, :, None].int(), sentinel)
    return ranks.min(dim=1).values
