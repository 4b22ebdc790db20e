"""Many-to-many triplet matching and first-hit ranks, on padded batches.

A predicted triplet j hits GT relation g when subject class, predicate and object class are equal and both
the subject IoU and the object IoU are >= ``iou_thr`` (or, for phrase detection, the IoU of the union boxes).
No one-to-one assignment: one prediction may hit several GT relations and vice versa.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from .boxes import box_iou, box_iou_unchecked, paired_box_iou, union_boxes

from .limits import NO_HIT  # rank of a GT relation that no prediction hits


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


def same_class_matrix(pred_labels: Tensor, gt_labels: Tensor) -> Tensor:
    """[B, N, M] bool: predicted object n and GT object m have the same class (negative = padding, never)."""
    # int32 (class indices are small) halves the compare's memory traffic; padding (-2 / -1) never meets
    pred_labels = torch.where(pred_labels >= 0, pred_labels, torch.full_like(pred_labels, -2)).int()
    return pred_labels[:, :, None] == gt_labels.int()[:, None, :]


def box_object_matches(pred_boxes: Tensor, pred_labels: Tensor, gt_boxes: Tensor, gt_labels: Tensor,
                       iou_thr: float, plus_one: bool = False, sparse: Optional[bool] = None) -> Tensor:
    """[B, N, M] bool: predicted object n of image b matches GT object m (same class and box IoU >= thr).

    Padding labels are negative. ``sparse`` (default: on the CPU) computes the IoU only for the same-class
    pairs (a few percent of N x M on VG-like data); otherwise the full matrix is computed (no host sync).
    """
    same_class = same_class_matrix(pred_labels, gt_labels)
    if not (same_class.device.type == 'cpu' if sparse is None else sparse):
        iou = box_iou(pred_boxes, gt_boxes, plus_one) if iou_thr <= 0 else \
            box_iou_unchecked(pred_boxes, gt_boxes, plus_one)  # NaN >= thr is False, as 0 >= thr
        return same_class & (iou >= iou_thr)
    batch, num_pred, num_gt = same_class.shape
    flat = same_class.view(-1).nonzero().squeeze(1)
    pred_row = flat // num_gt  # b * N + n
    gt_row = flat // (num_pred * num_gt) * num_gt + flat % num_gt  # b * M + m
    iou = paired_box_iou(pred_boxes.reshape(-1, 4).index_select(0, pred_row),
                         gt_boxes.reshape(-1, 4).index_select(0, gt_row), plus_one)
    out = torch.zeros(same_class.numel(), dtype=torch.bool, device=same_class.device)
    out[flat] = iou >= iou_thr
    return out.view(batch, num_pred, num_gt)


def relation_end_matches(object_matches: Tensor, gt_subject: Tensor, gt_object: Tensor,
                         gt_valid: Tensor) -> Tuple[Tensor, Tensor]:
    """Predicted objects that match the subject / the object of each GT relation: two [B, N, G] bool.

    ``object_matches`` [B, N, M] (see :func:`box_object_matches`); padded GT relations match nothing.
    """
    num_pred = object_matches.shape[1]
    subject_ok = object_matches.gather(2, gt_subject[:, None, :].expand(-1, num_pred, -1))
    object_ok = object_matches.gather(2, gt_object[:, None, :].expand(-1, num_pred, -1))
    return subject_ok & gt_valid[:, None, :], object_ok


def ranked_list_hits(subject_ok: Tensor, object_ok: Tensor, pred_subject: Tensor, pred_object: Tensor,
                     pred_predicate: Tensor, pred_valid: Tensor, gt_predicate: Tensor,
                     num_predicates: Optional[int] = None) -> Tensor:
    """Hit matrix [B, J, G] of a ranked list of J (subject idx, object idx, predicate) entries per image.

    Equal to :func:`triplet_hits` for box/mask matching, from :func:`relation_end_matches`'s tables: row
    lookups per entry instead of gathers over every (entry, GT relation) pair. With ``num_predicates`` the
    predicate test is a row lookup too (a [B, P + 1, G] table of which GT relations carry predicate p).
    """
    batch, num_pred, num_gt = subject_ok.shape
    length = pred_subject.shape[1]
    device = subject_ok.device
    if num_pred == 0 or length == 0 or num_gt == 0:
        return torch.zeros((batch, length, num_gt), dtype=torch.bool, device=device)
    image = torch.arange(batch, device=device)[:, None]
    base = image * num_pred
    sub = subject_ok.reshape(batch * num_pred, num_gt).index_select(0, (pred_subject + base).reshape(-1))
    obj = object_ok.reshape(batch * num_pred, num_gt).index_select(0, (pred_object + base).reshape(-1))
    if num_predicates is None:
        same = (pred_predicate[:, :, None] == gt_predicate[:, None, :]) & pred_valid[:, :, None]
        return (sub & obj).view(batch, length, num_gt) & same
    # row p of image b: GT relations with predicate p; row P (invalid entries, out-of-range predicates): none
    rows = torch.arange(num_predicates + 1, device=device)
    carries = (gt_predicate[:, None, :] == rows[None, :, None]).reshape(batch * (num_predicates + 1), num_gt)
    in_range = pred_valid & (pred_predicate >= 0) & (pred_predicate < num_predicates)
    row = torch.where(in_range, pred_predicate, torch.full_like(pred_predicate, num_predicates))
    same = carries.index_select(0, (row + image * (num_predicates + 1)).reshape(-1))
    return (sub & obj & same).view(batch, length, num_gt)


def first_hit_rank(hits: Tensor, list_valid: Optional[Tensor] = None) -> Tensor:
    """0-based position of the first prediction hitting each GT relation: [B, J, G] -> [B, G] int32.

    GT relations that no prediction hits get ``NO_HIT`` (2**30, larger than any K). ``list_valid`` [B, J] optionally
    restricts the list (e.g. the pair-accuracy sub-list); positions then count only kept entries.
    """
    batch, length, num_gt = hits.shape
    if length == 0:
        return torch.full((batch, num_gt), NO_HIT, dtype=torch.int32, device=hits.device)
    if list_valid is not None:
        hits = hits & list_valid[:, :, None]
    any_hit, first = hits.view(torch.uint8).max(dim=1)  # max returns the first maximal index
    if list_valid is not None:
        first = (torch.cumsum(list_valid.int(), dim=1) - 1).gather(1, first)
    return torch.where(any_hit > 0, first.int(), torch.full((), NO_HIT, dtype=torch.int32, device=hits.device))
