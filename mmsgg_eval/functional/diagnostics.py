"""Signs of the input mistakes users make most, as small per-image flags and the warnings they add up to.

The metrics never change a number because of these: they store one byte of flags and the first ranked
predicate per image in their rows (reduced with the other rows, so every world size warns alike) and warn
once per evaluation when the evaluated images as a whole look like one of these mistakes.

Predicted boxes (SGCls with model boxes, SGDet, PhrDet; xyxy pixels, expected in the ORIGINAL image frame):

* ``BOX_OUTSIDE``: more than half of an image's boxes reach outside the original image (``ori_shape``, with a
  tolerance of 1 pixel + 0.5 %). Warned when that holds for more than half of the checked images: boxes in
  the network's resized frame of upscaled images (mmdet's ``rescale=False``) look like this.
* ``BOX_FITS_RESIZED``: the image was shrunk by the test pipeline (``img_shape`` or ``scale_factor`` at most
  0.8 of ``ori_shape``) and every box lies inside the resized extent (same tolerance), i.e. the boxes fit the
  resized frame better than the original one. Warned when every such image (at least 2) is flagged.
* ``BOX_UNIT``: every coordinate of the image's boxes lies in [0, 1] although the image is larger than 16
  pixels on both sides. Warned when every checked image is flagged: normalised boxes.

Object labels (SGCls with the model's labels, SGDet, PhrDet; 0-based class indices expected): a model that
writes 1-based labels (or labels one below) gives R@K = 0 and mAP = 0. Per image, the predicted objects that
overlap a GT box (IoU >= 0.5) are counted, and among them those overlapping a GT box of their own class, of
class label - 1 and of class label + 1 (:func:`label_offset_counts`; the scene-graph metrics check the images of
:func:`label_checked_images`). Warned when the shifted class explains
most of them: over all checked images at least :data:`LABEL_SHIFT_MIN_OBJECTS` objects match the shifted class,
more than half of the overlapping objects do and at least 4 times as many as match their own class, and the
evidence is consistent image by image (in at least 80 % of the images with overlapping objects, and at least
2 of them, the shifted class matches more objects than the own class). A correct detector matches its own class.

Predicate score columns (``[R, P + 1]`` is read as column 0 = no relation, ``[R, P]`` as no background column,
unless the metric's ``score_layout`` says otherwise): a model that put the background column LAST, or dropped a
column, shifts every predicate by one. Warned when the graph-constrained R@K is 0 while the no-graph-constraint
ngR@K is at least 15 (percent, on at least 10 evaluated images), or when the first graph-constrained prediction
of at least 98 % of at least 50 predicted images has the same predicate and it is the first or the last one
(where a shifted background column lands), or, on small sets too, image by image: in every image whose
graph-constrained list has at least :data:`HEAD_MIN_ENTRIES` entries (at least 3 such images) its first
:data:`HEAD_ENTRIES` entries all carry one predicate, the same first or last one in every image, that predicate
has less than 10 % of the evaluated GT relations, and R@K is below 5: a background column read as a predicate
wins every pair (a real model ranks several predicates in its first entries, and a model that favours one
predicate favours a common one, which it recalls).
"""
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import compiled
from .boxes import box_iou
from .transfer import sync_free

BOX_CHECKED = 1       # the image has predicted boxes and a known original size
BOX_OUTSIDE = 2
BOX_FITS_RESIZED = 4
BOX_DOWNSCALED = 8    # the test pipeline shrank the image (resized / original <= DOWNSCALE_LIMIT)
BOX_UNIT = 16

DOWNSCALE_LIMIT = 0.8
BOX_TOLERANCE_PX = 1.0
BOX_TOLERANCE_REL = 0.005
UNIT_MIN_IMAGE_SIDE = 16
SHIFT_MIN_EVALUATED = 10
SHIFT_MIN_NG_RECALL = 15.0  # percent
SAME_TOP_MIN_IMAGES = 50
SAME_TOP_SHARE = 0.98
HEAD_ENTRIES = 10          # first graph-constrained entries of an image looked at
HEAD_MIN_ENTRIES = 5       # an image tells with at least this many listed entries
HEAD_MIN_IMAGES = 3
HEAD_MAX_RECALL = 5.0      # percent
HEAD_MAX_GT_SHARE = 0.1    # the uniform predicate is rare in the evaluated GT (a background column is no predicate)
LABEL_IOU = 0.5
LABEL_SHIFT_MIN_OBJECTS = 5
LABEL_SHIFT_RATIO = 4.0
LABEL_SHIFT_IMAGE_SHARE = 0.8
#: the images whose object labels the scene-graph metrics check: ``sample_idx`` below LABEL_CHECK_ALL, then one in
#: LABEL_CHECK_EVERY (the evidence of a whole evaluation without an IoU matrix for every image; by ``sample_idx``,
#: so that every world size and pooling checks the same images)
LABEL_CHECK_ALL = 64
LABEL_CHECK_EVERY = 8
#: (column of :func:`label_offset_counts`, GT class - predicted label, what the model's labels look like)
LABEL_SHIFTS = ((2, -1, '1-based (each label is the GT class + 1)'), (3, 1, 'one below the GT class (label - 1)'))


def box_frame_flags(boxes: Tensor, valid: Tensor, original_wh: Tensor, resized_wh: Tensor) -> Tensor:
    """[B] uint8 flags (see the module docstring) of predicted boxes ``boxes`` [B, N, 4] (``valid`` [B, N]
    marks the real ones) given each image's original size ``original_wh`` [B, 2] and the size the test pipeline
    resized it to ``resized_wh`` [B, 2] (pixels; NaN where unknown)."""
    b = boxes.shape[0]
    flags = torch.zeros(b, dtype=torch.uint8, device=boxes.device)
    if b == 0 or boxes.shape[1] == 0:
        return flags
    boxes = boxes.float()
    original_wh = original_wh.to(boxes.device, torch.float32)
    resized_wh = resized_wh.to(boxes.device, torch.float32)
    known = torch.isfinite(original_wh).all(1) & (original_wh > 0).all(1)  # (no image known: every flag 0)
    count = valid.sum(1)
    checked = known & (count > 0)

    def inside(extent: Tensor) -> Tensor:  # [B, N]: box within [-tol, extent + tol] on both axes
        tol = BOX_TOLERANCE_PX + BOX_TOLERANCE_REL * extent
        low = (boxes[..., :2] >= -tol[:, None, :]).all(-1)
        high = (boxes[..., 2:] <= (extent + tol)[:, None, :]).all(-1)
        return low & high

    wh = torch.where(known[:, None], original_wh, torch.ones_like(original_wh))
    outside = (~inside(wh) & valid).sum(1)
    flags |= torch.where(checked & (2 * outside > count), BOX_OUTSIDE, 0).to(torch.uint8)
    ratio = (resized_wh / wh).amax(1)
    downscaled = checked & torch.isfinite(ratio) & (ratio <= DOWNSCALE_LIMIT)
    resized = torch.where(downscaled[:, None], resized_wh, wh)
    fits = ((inside(resized) | ~valid).all(1)) & downscaled
    flags |= torch.where(downscaled, BOX_DOWNSCALED, 0).to(torch.uint8)
    flags |= torch.where(fits, BOX_FITS_RESIZED, 0).to(torch.uint8)
    in_unit = (((boxes >= 0) & (boxes <= 1)).all(-1) | ~valid).all(1)
    big = (wh > UNIT_MIN_IMAGE_SIDE).all(1)
    flags |= torch.where(checked & big & in_unit, BOX_UNIT, 0).to(torch.uint8)
    flags |= torch.where(checked, BOX_CHECKED, 0).to(torch.uint8)
    return flags


def image_diagnostics(pred_boxes: Tensor, pred_labels: Tensor, gt_boxes: Tensor, gt_labels: Tensor,
                      original_wh: Tensor, resized_wh: Tensor, label_images: Tensor,
                      plus_one: bool) -> Tuple[Tensor, Tensor]:
    """The per-image input diagnostics of a padded batch: ``(flags [B] uint8, offsets [B, 4] int32)``, the
    :func:`box_frame_flags` of the predicted boxes ``pred_boxes`` [B, N, 4] (real where ``pred_labels`` [B, N] >= 0;
    ``original_wh`` / ``resized_wh`` [B, 2] (width, height) pixels, NaN where unknown) and the
    :func:`label_offset_counts` (box IoU at :data:`LABEL_IOU`, legacy +1 pixel when ``plus_one``) of the images
    marked in ``label_images`` [B] bool against the GT ``gt_boxes`` [B, M, 4] / ``gt_labels`` [B, M] (-1 padding),
    zeros for the others. On the CPU the compiled kernels compute both in one pass over the images where they are
    built (the same numbers); elsewhere the torch operations above run (on accelerators for every image, the
    unchecked ones' counts then zeroed, so that the host never waits for the selection)."""
    kernels = compiled.kernels()
    if kernels is not None and pred_boxes.device.type == 'cpu' and hasattr(kernels, 'image_diagnostics'):
        return kernels.image_diagnostics(
            pred_boxes.float(), pred_labels.long(), gt_boxes.float(), gt_labels.long(), original_wh.float(),
            resized_wh.float(), label_images.bool(), LABEL_IOU, bool(plus_one), BOX_TOLERANCE_PX, BOX_TOLERANCE_REL,
            DOWNSCALE_LIMIT, UNIT_MIN_IMAGE_SIDE,
            [BOX_CHECKED, BOX_OUTSIDE, BOX_FITS_RESIZED, BOX_DOWNSCALED, BOX_UNIT])
    flags = box_frame_flags(pred_boxes, pred_labels >= 0, original_wh, resized_wh)
    if sync_free(pred_boxes.device):  # every image's counts, the unchecked ones' then zeroed: no host wait
        counts = label_offset_counts(box_iou(pred_boxes, gt_boxes, plus_one), pred_labels, gt_labels)
        return flags, torch.where(label_images[:, None], counts, 0).to(torch.int32)
    checked = label_images.nonzero().squeeze(1)
    offsets = torch.zeros((pred_boxes.shape[0], 4), dtype=torch.int32, device=pred_boxes.device)
    offsets[checked] = label_offset_counts(box_iou(pred_boxes[checked], gt_boxes[checked], plus_one),
                                           pred_labels[checked], gt_labels[checked])
    return flags, offsets


def label_offsets(pred_boxes: Tensor, pred_labels: Tensor, gt_boxes: Tensor, gt_labels: Tensor,
                  plus_one: bool) -> Tensor:
    """:func:`label_offset_counts` [B, 4] int32 of every image of a padded batch (box IoU at :data:`LABEL_IOU`; labels
    -1 = padding): the compiled kernel of :func:`image_diagnostics` on the CPU where built, else the torch
    operations."""
    kernels = compiled.kernels()
    if kernels is not None and pred_boxes.device.type == 'cpu' and hasattr(kernels, 'image_diagnostics'):
        unknown = torch.full((pred_boxes.shape[0], 2), float('nan'))  # no image size: no box-frame flag
        return image_diagnostics(pred_boxes, pred_labels, gt_boxes, gt_labels, unknown, unknown,
                                 torch.ones(pred_boxes.shape[0], dtype=torch.bool), plus_one)[1]
    return label_offset_counts(box_iou(pred_boxes, gt_boxes, plus_one), pred_labels, gt_labels)


def box_frame_warnings(flags: Tensor) -> List[str]:
    """The warnings the per-image ``flags`` [I] of the evaluated images add up to (empty when none)."""
    flags = flags.to(torch.int32)

    def count(bit: int) -> int:
        return int(((flags & bit) != 0).sum())

    checked = count(BOX_CHECKED)
    out = []
    if not checked:
        return out
    if count(BOX_UNIT) == checked:
        out.append(f'the predicted boxes of all {checked} images lie in [0, 1]: normalised coordinates? Boxes must '
                   f'be xyxy pixels of the original image (multiply x by the width and y by the height)')
    elif 2 * count(BOX_OUTSIDE) > checked:
        out.append(f'in {count(BOX_OUTSIDE)} of {checked} images most predicted boxes reach outside the original '
                   f'image (ori_shape): boxes in the resized (network input) frame? Boxes must be in the original '
                   f'frame (mmdet: predict with rescale=True, or divide by the scale_factor)')
    downscaled = count(BOX_DOWNSCALED)
    if downscaled >= 2 and count(BOX_FITS_RESIZED) == downscaled and not out:
        out.append(f'in all {downscaled} images the test pipeline shrank, every predicted box lies inside the '
                   f'resized image (img_shape) instead of spreading over the original one: boxes in the resized '
                   f'(network input) frame? Boxes must be in the original frame (mmdet: predict with '
                   f'rescale=True, or divide by the scale_factor)')
    return out


def describe_score_columns(widths: Tensor, num_predicates: int, score_layout: str) -> str:
    """How the predicate score columns were read, e.g. ``'[R, 51]: column 0 = no relation (40 images)'``, from
    the per-image column counts ``widths`` [I] (-1 single-label, 0 no pair given)."""
    given = widths[widths != 0]
    values, numbers = torch.unique(given, return_counts=True)  # (one pass in torch, not one per image in Python)
    counts = dict(zip(values.tolist(), numbers.tolist()))
    if not counts:
        return 'no predicted pair'
    parts = []
    for width, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if width < 0:
            meaning = '[R] scores with pred_relations.labels (one predicate per pair)'
        elif width == num_predicates + 1:
            column = num_predicates if score_layout == 'background_last' else 0
            meaning = f'[R, {width}]: column {column} = no relation, {num_predicates} predicates'
        else:
            meaning = f'[R, {width}]: no background column, {num_predicates} predicates'
        parts.append(f'{meaning} ({n} image{"s" if n != 1 else ""})')
    return '; '.join(parts)


def score_column_warnings(recall: Optional[float], ng_recall: Optional[float], k: int, num_evaluated: int,
                          top_predicate: Tensor, widths: Tensor, predicates: Sequence[str],
                          score_layout: str, head: Optional[Tensor] = None,
                          gt_counts: Optional[Tensor] = None) -> List[str]:
    """Warnings when the evaluation looks like shifted predicate columns (see the module docstring).
    ``recall`` / ``ng_recall``: R@K / ngR@K (percent) at the largest K (None: not computed); ``top_predicate``
    [I] the predicate of each image's first graph-constrained entry (-1: none); ``widths`` [I] the score
    columns each image gave; ``head`` [I, 2] the :func:`head_predicate_flags` (None: not recorded); ``gt_counts``
    [P] the evaluated GT relations of each predicate."""
    read_as = describe_score_columns(widths, len(predicates), score_layout)
    hint = (f"the predicate scores were read as {read_as}; if the model's background column is last, or a "
            f"column is missing, every predicate is shifted by one: set score_layout='background_last' / "
            f"'background_first' / 'no_background' to say how the columns are laid out")
    out = []
    matrix = (widths > 0).any()
    if matrix and recall is not None and ng_recall is not None and num_evaluated >= SHIFT_MIN_EVALUATED \
            and recall == 0 and ng_recall >= SHIFT_MIN_NG_RECALL:
        out.append(f'graph-constrained R@{k} is 0 while ngR@{k} is {ng_recall:.2f} ({num_evaluated} images): no '
                   f'GT predicate is ever the best-scored one of its pair, which misplaced score columns (or '
                   f'random scores) give; {hint}')
    predicted = top_predicate[(top_predicate >= 0) & (widths > 0)].long()
    if matrix and predicted.numel() >= SAME_TOP_MIN_IMAGES and len(predicates):
        counts = torch.bincount(predicted, minlength=len(predicates))
        share, which = float(counts.max()) / predicted.numel(), int(counts.argmax())
        if share >= SAME_TOP_SHARE and which in (0, len(predicates) - 1):
            out.append(f'the first graph-constrained prediction of {100 * share:.0f}% of {predicted.numel()} images '
                       f'has the same predicate, {predicates[which]!r} (column {which} of the predicates): {hint}')
    if matrix and head is not None and not out:
        out += uniform_head_warning(head, top_predicate, widths, recall, k, predicates, hint, gt_counts)
    return out



def label_offset_counts(iou: Tensor, pred_labels: Tensor, gt_labels: Tensor, iou_thr: float = LABEL_IOU) -> Tensor:
    """[B, 4] int32 per image: the predicted objects overlapping a GT box (IoU >= ``iou_thr``; ``iou`` [B, N, M]
    predicted x GT), and among them those overlapping a GT box of class label, label - 1 and label + 1
    (``pred_labels`` [B, N], ``gt_labels`` [B, M]; -1 = padding)."""
    over = (iou >= iou_thr) & (pred_labels >= 0)[:, :, None] & (gt_labels >= 0)[:, None, :]
    counts = [over.any(2).sum(1)]
    for offset in (0, -1, 1):
        counts.append((over & ((pred_labels[:, :, None] + offset) == gt_labels[:, None, :])).any(2).sum(1))
    return torch.stack(counts, 1).to(torch.int32)


def label_checked_images(sample_idx: Tensor) -> Tensor:
    """[B] bool: the images whose object labels are checked (:data:`LABEL_CHECK_ALL`, :data:`LABEL_CHECK_EVERY`)."""
    return (sample_idx < LABEL_CHECK_ALL) | (sample_idx % LABEL_CHECK_EVERY == 0)


def label_shift_warnings(counts: Tensor, num_classes: int) -> List[str]:
    """Warnings when the predicted object labels look shifted by one against the GT classes (see the module
    docstring); ``counts`` [I, 4] of :func:`label_offset_counts` of the evaluated images."""
    counts = counts.long().reshape(-1, 4)
    overlapping, own = int(counts[:, 0].sum()), int(counts[:, 1].sum())
    telling = counts[:, 0] > 0
    out = []
    for column, _, looks in LABEL_SHIFTS:
        shifted = int(counts[:, column].sum())
        consistent = int((telling & (counts[:, column] > counts[:, 1])).sum())
        images = int(telling.sum())
        if shifted >= LABEL_SHIFT_MIN_OBJECTS and 2 * shifted > overlapping and shifted >= LABEL_SHIFT_RATIO * own \
                and images >= 2 and consistent >= LABEL_SHIFT_IMAGE_SHARE * images:
            out.append(f'{shifted} of the {overlapping} predicted objects that overlap a GT box (IoU >= {LABEL_IOU}) '
                       f'overlap one of class label {"- 1" if column == 2 else "+ 1"} and only {own} one of their own '
                       f'class ({consistent} of {images} images): the object labels look {looks}. Labels must be '
                       f'0-based indices into the {num_classes} dataset classes (subtract 1 from 1-based labels, '
                       f'no background class)')
    return out


def head_predicate_flags(head_predicates: Tensor, head_valid: Tensor) -> Tensor:
    """[B, 2] int16 per image: the number of listed entries among the first :data:`HEAD_ENTRIES` of its
    graph-constrained list, and how many of them carry the predicate of the first (``head_predicates`` /
    ``head_valid`` [B, L], L <= :data:`HEAD_ENTRIES`)."""
    listed = head_valid.sum(1)
    if head_predicates.shape[1] == 0:
        return torch.stack([listed, listed], 1).to(torch.int16)
    same = (head_valid & (head_predicates == head_predicates[:, :1])).sum(1)
    return torch.stack([listed, same], 1).to(torch.int16)


def uniform_head_warning(head: Tensor, top_predicate: Tensor, widths: Tensor, recall: Optional[float], k: int,
                         predicates: Sequence[str], hint: str, gt_counts: Optional[Tensor] = None) -> List[str]:
    """The small-set score-column warning (module docstring): ``head`` [I, 2] of :func:`head_predicate_flags`,
    ``top_predicate`` [I], ``widths`` [I], ``recall`` R@K (percent) at the largest K, ``gt_counts`` [P] the
    evaluated GT relations of each predicate (None: unknown)."""
    if recall is None or recall >= HEAD_MAX_RECALL or not len(predicates):
        return []
    head = head.long().reshape(-1, 2)
    telling = (head[:, 0] >= HEAD_MIN_ENTRIES) & (widths > 0) & (top_predicate >= 0)
    images = int(telling.sum())
    if images < HEAD_MIN_IMAGES:
        return []
    tops = top_predicate[telling].long()
    uniform = bool((head[telling, 1] == head[telling, 0]).all()) and bool((tops == tops[0]).all())
    which = int(tops[0])
    if not uniform or which not in (0, len(predicates) - 1):
        return []
    if gt_counts is not None and int(gt_counts.sum()) and \
            float(gt_counts[which]) >= HEAD_MAX_GT_SHARE * float(gt_counts.sum()):
        return []  # a model may favour a predicate this common in the GT (a frequency-sorted list's first one)
    return [f'in all {images} images with at least {HEAD_MIN_ENTRIES} graph-constrained predictions, the first '
            f'{HEAD_ENTRIES} all have the predicate {predicates[which]!r} (column {which} of the predicates) and '
            f'R@{k} is {recall:.2f}: a background column read as that predicate wins every pair; {hint}']
