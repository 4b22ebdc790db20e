"""COCO-style detection AP (pycocotools ``COCOeval``, iouType 'bbox', area range 'all') as tensor functions.

COCO matching is per image, so it splits in two steps:

1. :func:`coco_match_detections` (any device, a padded batch of images): per detection, in COCO's evaluation
   order, whether it is kept (among the ``max_dets`` highest-scored of its class in its image), and for
   every IoU threshold 0.50:0.05:0.95 whether it matched a GT box and whether it is ignored; per image and
   class the number of non-ignored GT boxes. These compact rows are all a distributed run has to gather. On the
   CPU the whole matching runs image by image in the compiled kernel ``coco_match_images`` where it is built
   (the same orders, the same comparisons on the same float64 IoU values: the same rows).
2. :func:`coco_precision` (CPU, float64): integrates precision over the 101 recall thresholds per class
   exactly as ``COCOeval.accumulate`` does, from the rows of all images concatenated in image order (class by
   class in the compiled kernel ``coco_precision_table`` where it is built: the same float64 operations);
   :func:`coco_summary` averages it like ``COCOeval.summarize`` (``mAP`` = stats[0], ``AP@50`` = stats[1]).

Conventions (those of the legacy Scene-Graph-Benchmark detection evaluation, which feeds pycocotools):
boxes are xyxy in original image pixels; with ``plus_one`` widths are ``x2 - x1 + 1`` (VG150 / GQA200),
else ``x2 - x1``; IoU is pycocotools' ``bbIou`` in float64 on those xywh boxes; labels are 0-based classes;
every GT box is a regular (non-crowd) annotation; a GT box is ignored only when its area lies outside
``area_range`` (COCO 'all': [0, 1e10]), a detection only when it matches an ignored GT box or, unmatched,
has an area outside the range. Ties in score keep image order, then the given order within an image (the
stable sorts of pycocotools).
"""
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from . import compiled

# exactly the threshold vectors of pycocotools.cocoeval.Params (np.linspace values, float64)
COCO_IOU_THRESHOLDS = np.linspace(.5, 0.95, int(np.round((0.95 - .5) / .05)) + 1, endpoint=True)
COCO_RECALL_THRESHOLDS = np.linspace(.0, 1.00, int(np.round((1.00 - .0) / .01)) + 1, endpoint=True)
COCO_AREA_ALL = (0.0, 1e5 ** 2)


def coco_xywh(boxes: Tensor, plus_one: bool = False, float32_sizes: bool = False) -> Tensor:
    """COCO xywh (float64) of xyxy boxes: ``w = x2 - x1 (+ 1)``, computed in float64, or in float32 and then
    widened when ``float32_sizes`` (what the legacy ``BoxList.convert('xywh')`` of the predictions does)."""
    extra = 1.0 if plus_one else 0.0
    b = boxes.float() if float32_sizes else boxes.double()
    wh = b[..., 2:] - b[..., :2] + extra
    return torch.cat([b[..., :2].double(), wh.double()], dim=-1)


def coco_box_iou(det_boxes: Tensor, gt_boxes: Tensor, plus_one: bool = False,
                 float32_det_sizes: bool = False) -> Tensor:
    """pycocotools ``bbIou`` of xyxy boxes ``[..., D, 4]`` x ``[..., G, 4]`` -> float64 ``[..., D, G]``.

    The boxes are first turned into COCO xywh (:func:`coco_xywh`) and the IoU is computed with the
    operation order of pycocotools' C code, so the values are bit-identical to ``maskUtils.iou``.
    """
    d = coco_xywh(det_boxes, plus_one, float32_det_sizes)
    g = coco_xywh(gt_boxes, plus_one)
    dx, dy, dw, dh = d.unbind(-1)
    gx, gy, gw, gh = g.unbind(-1)
    w = torch.minimum((dw + dx)[..., :, None], (gw + gx)[..., None, :]) - torch.maximum(dx[..., :, None],
                                                                                      gx[..., None, :])
    h = torch.minimum((dh + dy)[..., :, None], (gh + gy)[..., None, :]) - torch.maximum(dy[..., :, None],
                                                                                      gy[..., None, :])
    inter = w * h
    union = (dw * dh)[..., :, None] + (gw * gh)[..., None, :] - inter
    iou = inter / union
    return torch.where((w <= 0) | (h <= 0), torch.zeros_like(iou), iou)


def coco_box_area(boxes: Tensor, plus_one: bool = False, float32_sizes: bool = False) -> Tensor:
    """COCO area ``w * h`` (float64) of xyxy boxes, sizes as :func:`coco_xywh`."""
    wh = coco_xywh(boxes, plus_one, float32_sizes)[..., 2:]
    return wh[..., 0] * wh[..., 1]


def _rank_within_label(labels: Tensor, valid: Tensor, num_classes: int) -> Tensor:
    """Position of each entry among the valid entries of the same label in its row (0-based; order kept)."""
    width = labels.shape[1]
    key = torch.where(valid, labels.long(), torch.full_like(labels.long(), num_classes))
    perm = torch.sort(key, dim=1, stable=True).indices
    sorted_key = key.gather(1, perm)
    pos = torch.arange(width, device=labels.device).expand_as(key)
    is_start = torch.ones_like(valid)
    is_start[:, 1:] = sorted_key[:, 1:] != sorted_key[:, :-1]
    start = torch.cummax(torch.where(is_start, pos, torch.zeros_like(pos)), dim=1).values
    rank = torch.empty_like(pos)
    rank.scatter_(1, perm, pos - start)
    return rank


def _sort_detections(det_boxes: Tensor, det_scores: Tensor, det_labels: Tensor, det_valid: Tensor,
                     num_classes: int, max_dets: int) -> Dict[str, Tensor]:
    """Detections in COCO's evaluation order (stable descending score per image, padding last) and which
    are kept (valid and among the ``max_dets`` first of their class in their image)."""
    scores = torch.where(det_valid, det_scores.double(), torch.full_like(det_scores.double(), float('-inf')))
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices
    valid = det_valid.gather(1, order)
    labels = det_labels.long().gather(1, order)
    return dict(order=order, scores=det_scores.gather(1, order), labels=labels,
                boxes=det_boxes.gather(1, order[..., None].expand(-1, -1, 4)),
                kept=valid & (_rank_within_label(labels, valid, num_classes) < max_dets))


def _order_gt(gt_boxes: Tensor, gt_labels: Tensor, gt_valid: Tensor, gt_unmatchable: Optional[Tensor],
              plus_one: bool, lo: float, hi: float) -> Dict[str, Tensor]:
    """GT boxes in pycocotools' visiting order: the regular boxes of an image first, then the ignored ones
    (area outside [lo, hi]) and the padding (stable)."""
    gt_area = coco_box_area(gt_boxes, plus_one)
    gt_ignored_raw = (gt_area < lo) | (gt_area > hi)
    gt_order = torch.sort((gt_ignored_raw | ~gt_valid).to(torch.int8), dim=1, stable=True).indices
    valid = gt_valid.gather(1, gt_order)
    return dict(boxes=gt_boxes.gather(1, gt_order[..., None].expand(-1, -1, 4)),
                labels=gt_labels.long().gather(1, gt_order), valid=valid,
                ignored=gt_ignored_raw.gather(1, gt_order) & valid,
                unmatchable=(torch.zeros_like(valid) if gt_unmatchable is None
                             else gt_unmatchable.gather(1, gt_order)))


def _greedy_match(iou: Tensor, kept: Tensor, gt: Dict[str, Tensor], thrs: Tensor) -> Tuple[Tensor, Tensor]:
    """``COCOeval.evaluateImg``'s greedy loop over the detections of all images at once.

    ``iou`` float64 [B, D, G] (-1 where the classes differ or an entry is padding), detections in evaluation
    order; each detection takes, per threshold, the free GT box of highest IoU >= the threshold, regular boxes
    before ignored ones, the later box on ties. Returns ``matched`` / ``ignored`` bool [B, D, T] (a match
    of an unmatchable GT box is not ``matched``; ``ignored`` = matched an ignored GT box)."""
    batch, num_det, num_gt = iou.shape
    num_thr = thrs.numel()
    g_ignored, g_unmatchable = gt['ignored'], gt['unmatchable']
    matched = torch.zeros(batch, num_det, num_thr, dtype=torch.bool, device=iou.device)
    ignored = torch.zeros_like(matched)
    gt_taken = torch.zeros(batch, num_thr, num_gt, dtype=torch.bool, device=iou.device)
    kept_pos = torch.where(kept, torch.arange(num_det, device=iou.device).expand_as(kept),
                           torch.full_like(kept, -1, dtype=torch.long))
    steps = int(kept_pos.max()) + 1 if batch and num_det else 0
    last = max(num_gt - 1, 0)
    for d in range(steps if num_gt else 0):
        iou_d = iou[:, d, :]                                                    # [B, G]
        cand = (iou_d[:, None, :] >= thrs[None, :, None]) & ~gt_taken           # [B, T, G]
        regular = cand & ~g_ignored[:, None, :]
        use = torch.where(regular.any(-1, keepdim=True), regular, cand & g_ignored[:, None, :])
        value = torch.where(use, iou_d[:, None, :].expand_as(use), torch.full_like(use, -2.0, dtype=iou.dtype))
        best = last - torch.argmax(value.flip(-1), dim=-1)                      # ties: the later GT box
        hit = use.any(-1)                                                       # [B, T]
        gt_taken.scatter_(2, best[..., None], hit[..., None] | gt_taken.gather(2, best[..., None]))
        matched[:, d, :] = hit & ~g_unmatchable.gather(1, best)
        ignored[:, d, :] = hit & g_ignored.gather(1, best)
    return matched, ignored


def coco_match_detections(det_boxes: Tensor, det_scores: Tensor, det_labels: Tensor, det_valid: Tensor,
                          gt_boxes: Tensor, gt_labels: Tensor, gt_valid: Tensor, num_classes: int,
                          plus_one: bool = False, max_dets: int = 100, float32_det_sizes: bool = False,
                          gt_unmatchable: Optional[Tensor] = None,
                          iou_thrs: Sequence[float] = tuple(COCO_IOU_THRESHOLDS),
                          area_range: Tuple[float, float] = COCO_AREA_ALL) -> Dict[str, Tensor]:
    """COCO's per-image greedy matching (``COCOeval.evaluateImg``) for a padded batch of B images.

    Args:
        det_boxes: float [B, D, 4] xyxy; det_scores [B, D] (finite); det_labels int [B, D] 0-based;
            det_valid bool [B, D] (False = padding).
        gt_boxes: float [B, G, 4] xyxy; gt_labels int [B, G]; gt_valid bool [B, G].
        num_classes: C (labels lie in [0, C)).
        plus_one: legacy +1 widths (see the module doc).
        float32_det_sizes: detection widths / heights computed in float32 (the legacy evaluator's boxes).
        gt_unmatchable: optional bool [B, G]: GT boxes whose match does not count (the detection that takes
            one is a false positive), as pycocotools treats a GT annotation with id 0 (the legacy evaluator
            numbers its GT annotations from 0).
        max_dets: detections kept per image and class (pycocotools ``maxDets[-1]``).
        iou_thrs: IoU thresholds T (a detection matches at IoU >= min(t, 1 - 1e-10)).
        area_range: COCO area range; boxes with an area outside it are ignored.

    Returns (detections reordered per image by stable descending score, COCO's order):
        ``order`` int64 [B, D] (position in the input of each sorted entry), ``kept`` bool [B, D] (valid and
        within the top ``max_dets`` of its class), ``scores`` / ``labels`` [B, D] sorted, ``matched`` and
        ``ignored`` bool [B, D, T]; ``gt_counts`` int64 [B, C] non-ignored GT boxes per class.
    """
    thrs = torch.tensor([min(float(t), 1 - 1e-10) for t in iou_thrs], dtype=torch.float64,
                        device=det_boxes.device)
    lo, hi = float(area_range[0]), float(area_range[1])
    kernels = compiled.kernels()
    if (kernels is not None and det_boxes.device.type == 'cpu' and min(thrs.tolist(), default=1.0) > 0
            and bool(torch.isfinite(det_scores).all())):  # everything below, image by image
        unmatchable = gt_unmatchable if gt_unmatchable is not None else torch.zeros_like(gt_valid)
        order, kept, matched, ignored, gt_counts = kernels.coco_match_images(
            det_boxes.double(), det_scores.double(), det_labels.long(), det_valid, gt_boxes.double(),
            gt_labels.long(), gt_valid, unmatchable, thrs, num_classes, max_dets, plus_one, float32_det_sizes, lo, hi)
        return dict(order=order, kept=kept, scores=det_scores.gather(1, order),
                    labels=det_labels.long().gather(1, order), matched=matched, ignored=ignored, gt_counts=gt_counts)
    det = _sort_detections(det_boxes, det_scores, det_labels, det_valid, num_classes, max_dets)
    kept = det['kept']
    gt = _order_gt(gt_boxes, gt_labels, gt_valid, gt_unmatchable, plus_one, lo, hi)
    iou = coco_box_iou(det['boxes'], gt['boxes'], plus_one, float32_det_sizes)
    same = (det['labels'][:, :, None] == gt['labels'][:, None, :]) & kept[:, :, None] & gt['valid'][:, None, :]
    iou = torch.where(same, iou, torch.full_like(iou, -1.0))
    matched, ignored = _greedy_match(iou, kept, gt, thrs)
    det_area = coco_box_area(det['boxes'], plus_one, float32_det_sizes)
    outside = (det_area < lo) | (det_area > hi)
    ignored |= ~matched & outside[:, :, None]
    matched &= kept[:, :, None]
    ignored &= kept[:, :, None]

    counted = (gt['valid'] & ~gt['ignored']).long()
    gt_counts = torch.zeros(det_scores.shape[0], num_classes, dtype=torch.long, device=det_boxes.device)
    gt_counts.scatter_add_(1, gt['labels'].clamp(0, num_classes - 1), counted)
    return dict(order=det['order'], kept=kept, scores=det['scores'], labels=det['labels'], matched=matched,
                ignored=ignored, gt_counts=gt_counts)


def _sortable_key64(values: Tensor) -> Tensor:
    """Order-preserving int64 image of float64 ``values`` (no NaN; -0.0 equal to +0.0): sorting these integers
    (a radix sort) gives the order of sorting the floats (a comparison sort, several times slower)."""
    bits = (values.double() + 0.0).contiguous().view(torch.int64)
    return bits ^ ((bits >> 63) & 0x7FFFFFFFFFFFFFFF)


def coco_precision(scores: Tensor, labels: Tensor, matched: Tensor, ignored: Tensor, gt_counts: Tensor,
                   rec_thrs: Sequence[float] = tuple(COCO_RECALL_THRESHOLDS)) -> np.ndarray:
    """Interpolated precision ``[T, R, C]`` (float64; -1 for classes without non-ignored GT), ``COCOeval.accumulate``.

    Args:
        scores: [N] kept detections of all images, concatenated in image order, each image's rows in the
            order of :func:`coco_match_detections` (ties are resolved by that order).
        labels: int [N] 0-based classes; matched / ignored: bool [N, T].
        gt_counts: int [C] non-ignored GT boxes per class over all images.
        rec_thrs: recall thresholds R.
    """
    scores, labels = scores.double().cpu(), labels.long().cpu()
    matched, ignored, gt_counts = matched.bool().cpu(), ignored.bool().cpu(), gt_counts.long().cpu()
    num_thr = matched.shape[1] if matched.dim() == 2 else len(COCO_IOU_THRESHOLDS)
    rec = torch.as_tensor(np.asarray(rec_thrs, dtype=np.float64))
    num_classes = gt_counts.numel()
    precision = -np.ones((num_thr, rec.numel(), num_classes))
    by_score = torch.sort(~_sortable_key64(scores), stable=True).indices  # mergesort of -score, as accumulate
    by_class = by_score[torch.sort(labels[by_score], stable=True).indices]
    sorted_labels = labels[by_class]
    bounds = torch.searchsorted(sorted_labels, torch.arange(num_classes + 1))
    kernels = compiled.kernels()
    if kernels is not None and matched.dim() == 2:  # the loop below, class by class in one call
        return kernels.coco_precision_table(matched[by_class], ignored[by_class], bounds, gt_counts, rec).numpy()
    eps = np.spacing(1)
    for k in torch.nonzero(gt_counts > 0).flatten().tolist():
        rows = by_class[int(bounds[k]):int(bounds[k + 1])]
        npig = float(gt_counts[k])
        m, ig = matched[rows].T, ignored[rows].T                               # [T, n]
        tp = torch.cumsum(m & ~ig, dim=1).double()
        fp = torch.cumsum(~m & ~ig, dim=1).double()
        n = rows.numel()
        if n:
            rc = tp / npig
            pr = tp / (fp + tp + eps)
            pr = torch.cummax(pr.flip(1), dim=1).values.flip(1)                 # the monotone envelope
            inds = torch.searchsorted(rc, rec.expand(num_thr, -1).contiguous(), right=False)  # [T, R], each row
            q = torch.where(inds < n, pr.gather(1, inds.clamp(max=n - 1)), 0.0)  # its own sorted recalls
        else:
            q = torch.zeros(num_thr, rec.numel(), dtype=torch.float64)
        precision[:, :, k] = q.numpy()
    return precision


def coco_summary(precision: np.ndarray, iou_thrs: Sequence[float] = tuple(COCO_IOU_THRESHOLDS)) -> Dict[str, float]:
    """``COCOeval.summarize`` for area 'all': ``mAP`` (IoU .50:.95, stats[0]) and ``AP@50`` (stats[1]),
    fractions; -1 when no class has a GT box (pycocotools' convention)."""
    def mean(s: np.ndarray) -> float:
        s = s[s > -1]
        return float(np.mean(s)) if s.size else -1.0
    thr = np.asarray(iou_thrs, dtype=np.float64)
    at50 = np.where(thr == 0.5)[0]
    return {'mAP': mean(precision), 'AP@50': mean(precision[at50]) if at50.size else -1.0}


__all__ = ['COCO_IOU_THRESHOLDS', 'COCO_RECALL_THRESHOLDS', 'COCO_AREA_ALL', 'coco_xywh', 'coco_box_iou',
           'coco_box_area', 'coco_match_detections', 'coco_precision', 'coco_summary']
