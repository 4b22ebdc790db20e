"""Box and mask IoU on tensors of any device.

Boxes are xyxy in the pixel frame they were given in. Two conventions:

* continuous (``plus_one=False``): area = (x2 - x1) * (y2 - y1), as in mmdet, PSG and RSVG;
* legacy +1 pixel (``plus_one=True``): area = (x2 - x1 + 1) * (y2 - y1 + 1) and the intersection width is
  min(x2) - max(x1) + 1 clamped at 0, as in the Scene-Graph-Benchmark evaluator of VG150 / GQA200.

Everything is computed in float32 with the legacy operation order
(``inter / (area_a + area_b - inter)``) so results are bit-identical to the reference evaluator.
"""
import torch
from torch import Tensor


def box_area(boxes: Tensor, plus_one: bool = False) -> Tensor:
    """Area of xyxy boxes [..., 4] (float32)."""
    boxes = boxes.float()
    extra = 1.0 if plus_one else 0.0
    return (boxes[..., 2] - boxes[..., 0] + extra) * (boxes[..., 3] - boxes[..., 1] + extra)


def box_iou(boxes_a: Tensor, boxes_b: Tensor, plus_one: bool = False) -> Tensor:
    """Pairwise IoU of xyxy boxes ``[..., N, 4]`` x ``[..., M, 4]`` -> ``[..., N, M]`` (float32).

    Leading dimensions broadcast (a batch of images). ``plus_one`` selects the legacy +1-pixel convention.
    A pair of zero-area boxes (continuous convention) has IoU 0, not NaN.
    """
    return torch.nan_to_num(box_iou_unchecked(boxes_a, boxes_b, plus_one), nan=0.0)


def box_iou_unchecked(boxes_a: Tensor, boxes_b: Tensor, plus_one: bool = False) -> Tensor:
    """:func:`box_iou` without the NaN clean-up: 0/0 (two zero-area boxes, continuous convention) is NaN,
    which compares False with any threshold (the hot path only asks ``iou >= thr`` for ``thr > 0``)."""
    ax1, ay1, ax2, ay2 = boxes_a.float().unbind(-1)
    bx1, by1, bx2, by2 = boxes_b.float().unbind(-1)
    width = torch.minimum(ax2[..., :, None], bx2[..., None, :]).sub_(torch.maximum(ax1[..., :, None], bx1[..., None, :]))
    height = torch.minimum(ay2[..., :, None], by2[..., None, :]).sub_(torch.maximum(ay1[..., :, None], by1[..., None, :]))
    if plus_one:
        width.add_(1.0)
        height.add_(1.0)
    inter = width.clamp_(min=0).mul_(height.clamp_(min=0))
    union = (box_area(boxes_a, plus_one)[..., :, None] + box_area(boxes_b, plus_one)[..., None, :]).sub_(inter)
    return inter.div_(union)


def paired_box_iou(boxes_a: Tensor, boxes_b: Tensor, plus_one: bool = False) -> Tensor:
    """IoU of corresponding boxes ``[..., 4]`` and ``[..., 4]`` -> ``[...]`` (float32, same op order)."""
    a = boxes_a.float()
    b = boxes_b.float()
    extra = 1.0 if plus_one else 0.0
    lt = torch.maximum(a[..., :2], b[..., :2])
    rb = torch.minimum(a[..., 2:], b[..., 2:])
    wh = (rb - lt + extra).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = box_area(a, plus_one) + box_area(b, plus_one) - inter
    return torch.nan_to_num(inter / union, nan=0.0)


def union_boxes(boxes_a: Tensor, boxes_b: Tensor) -> Tensor:
    """Smallest xyxy box enclosing each pair of boxes ``[..., 4]`` (phrase detection, union crops)."""
    return torch.cat([torch.minimum(boxes_a[..., :2], boxes_b[..., :2]),
                      torch.maximum(boxes_a[..., 2:], boxes_b[..., 2:])], dim=-1)


def mask_iou(masks_a: Tensor, masks_b: Tensor) -> Tensor:
    """Pairwise IoU |A & B| / (|A| + |B| - |A & B|) of binary masks ``[..., N, H, W]`` x ``[..., M, H, W]``.

    Returns ``[..., N, M]`` float32; two empty masks have IoU 0. Counts are exact (integer-valued
    float64 matmul) so results do not depend on the device.
    """
    a = masks_a.flatten(-2).to(torch.float64)
    b = masks_b.flatten(-2).to(torch.float64)
    inter = a @ b.transpose(-1, -2)
    area_a = a.sum(-1)
    area_b = b.sum(-1)
    union = area_a[..., :, None] + area_b[..., None, :] - inter
    iou = torch.where(union > 0, inter / union.clamp(min=1), torch.zeros_like(inter))
    return iou.float()


def boxes_overlap(boxes_a: Tensor, boxes_b: Tensor) -> Tensor:
    """True where xyxy boxes ``[..., 4]`` and ``[..., 4]`` share a region of positive area (element-wise,
    continuous convention: touching boxes do not overlap), computed in the boxes' own dtype."""
    w = torch.minimum(boxes_a[..., 2], boxes_b[..., 2]) - torch.maximum(boxes_a[..., 0], boxes_b[..., 0])
    h = torch.minimum(boxes_a[..., 3], boxes_b[..., 3]) - torch.maximum(boxes_a[..., 1], boxes_b[..., 1])
    return (w > 0) & (h > 0)
