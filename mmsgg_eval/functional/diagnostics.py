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

Predicate score columns (``[R, P + 1]`` is read as column 0 = no relation, ``[R, P]`` as no background column,
unless the metric's ``score_layout`` says otherwise): a model that put the background column LAST, or dropped a
column, shifts every predicate by one. Warned when the graph-constrained R@K is 0 while the no-graph-constraint
ngR@K is at least 15 (percent, on at least 10 evaluated images), or when the first graph-constrained prediction of at least 98 %
of at least 50 predicted images has the same predicate and it is the first or the last one (where a shifted
background column lands).
"""
from collections import Counter
from typing import List, Optional, Sequence

import torch
from torch import Tensor

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
    counts = Counter(int(w) for w in widths.tolist() if w != 0)
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
                          score_layout: str) -> List[str]:
    """Warnings when the evaluation looks like shifted predicate columns (see the module docstring).
    ``recall`` / ``ng_recall``: R@K / ngR@K (percent) at the largest K (None: not computed); ``top_predicate``
    [I] the predicate of each image's first graph-constrained entry (-1: none); ``widths`` [I] the score
    columns each image gave."""
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
    return out

