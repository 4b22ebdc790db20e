"""Box arithmetic of the original RSVG (MGVLF) test loop, as pure tensor functions.

The original DIOR-RSVG code (ZhanYang-nwpu/RSVG-pytorch, ``data_loader.py`` + ``Mytest_epoch`` of
``main.py``) does not score against the XML box. Its loader letterboxes every image to a ``size`` x ``size``
square (default 640) and writes the mapped GT box into an INTEGER array; the test loop maps that integer
box back to the original frame and clamps it. For an image of W x H pixels:

* ``ratio = size / max(W, H)`` (float64); resized size ``new_w = round(W * ratio)``, ``new_h = round(H *
  ratio)`` (Python ``round``: half to even); padding ``dw = (size - new_w) / 2``, ``dh = (size - new_h) / 2``;
* letterboxed coordinate ``q = trunc(x * ratio + dw)`` (y: ``+ dh``), computed in float64 and truncated by
  the integer array; then clamped to [0, size - 1];
* back in the original frame, in float32: ``x' = (q - dw) / ratio`` (``dw``, ``ratio`` cast to float32);
* clamp: ``x1', y1' >= 0``, ``x2' <= W'``, ``y2' <= H'`` with ``W' = round(new_w / ratio32)``, ``H' =
  round(new_h / ratio32)`` (``ratio32`` = the float32 ratio read back as a Python float). W' can be smaller
  than W: an 800 x 533 image clamps at y = 532.

On a square 800 x 800 image (ratio 0.8, no padding) this is ``x' = floor(0.8 x) / 0.8``, with a box edge
at 800 moved to 639 / 0.8 = 798.75. The loop clamps its mapped-back predictions the same way (``x1, y1 >=
0``, ``x2 <= W'``, ``y2 <= H'``): :func:`mgvlf_clamp_predictions`.

Boxes are xyxy pixels [N, 4]; widths / heights [N] positive integers (pixels of the original image).
"""
from typing import Tuple

import torch
from torch import Tensor

MGVLF_IMAGE_SIZE = 640  # the --size default of the original code (letterbox side)


def mgvlf_letterbox(widths: Tensor, heights: Tensor, size: int = MGVLF_IMAGE_SIZE
                    ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Letterbox of images W x H into ``size`` x ``size``: (ratio, dw, dh, clamp_w, clamp_h), float64 [N].

    ``clamp_w`` / ``clamp_h`` are the W' / H' the original loop clamps x2 / y2 at (see the module doc).
    """
    w = torch.as_tensor(widths).to(torch.float64).reshape(-1)
    h = torch.as_tensor(heights, device=w.device).to(torch.float64).reshape(-1)
    if bool(((w <= 0) | (h <= 0) | ~torch.isfinite(w) | ~torch.isfinite(h)).any()):
        raise ValueError(f'mgvlf_letterbox: image widths and heights must be positive, got {w.tolist()} x '
                         f'{h.tolist()}')
    ratio = float(size) / torch.maximum(w, h)
    new_w, new_h = torch.round(w * ratio), torch.round(h * ratio)  # torch.round: half to even, as Python round
    dw, dh = (size - new_w) / 2, (size - new_h) / 2
    ratio32 = ratio.to(torch.float32).to(torch.float64)
    return ratio, dw, dh, torch.round(new_w / ratio32), torch.round(new_h / ratio32)


def mgvlf_gt_boxes(boxes: Tensor, widths: Tensor, heights: Tensor, size: int = MGVLF_IMAGE_SIZE) -> Tensor:
    """The GT boxes the original MGVLF test loop scores: XML boxes quantised through its letterbox.

    Args:
        boxes: [N, 4] xyxy XML boxes in original pixels.
        widths / heights: [N] original image size of each box.
        size: letterbox side of the original run (``--size``, default 640).

    Returns:
        float64 [N, 4] holding the float32 values of the original loop (see the module doc).
    """
    b = torch.as_tensor(boxes).to(torch.float64).reshape(-1, 4)
    ratio, dw, dh, clamp_w, clamp_h = mgvlf_letterbox(widths, heights, size)
    ratio, dw, dh = ratio.to(b.device), dw.to(b.device), dh.to(b.device)
    pad = torch.stack([dw, dh, dw, dh], 1)
    letterboxed = torch.trunc(b * ratio[:, None] + pad).clamp(0, size - 1).to(torch.float32)
    back = (letterboxed - pad.to(torch.float32)) / ratio.to(torch.float32)[:, None]
    return _clamp_like_mgvlf(back, clamp_w.to(b.device), clamp_h.to(b.device)).to(torch.float64)


def mgvlf_clamp_predictions(boxes: Tensor, widths: Tensor, heights: Tensor,
                            size: int = MGVLF_IMAGE_SIZE) -> Tensor:
    """Predicted boxes [N, 4] (original pixels) clamped as the original loop clamps its predictions:
    x1, y1 >= 0, x2 <= W', y2 <= H' (dtype kept; no upper clamp on x1 / y1, no lower one on x2 / y2)."""
    _, _, _, clamp_w, clamp_h = mgvlf_letterbox(widths, heights, size)
    return _clamp_like_mgvlf(torch.as_tensor(boxes).reshape(-1, 4), clamp_w.to(boxes.device),
                             clamp_h.to(boxes.device))


def _clamp_like_mgvlf(boxes: Tensor, clamp_w: Tensor, clamp_h: Tensor) -> Tensor:
    out = boxes.clone()
    out[:, :2] = out[:, :2].clamp(min=0)
    out[:, 2] = torch.minimum(out[:, 2], clamp_w.to(out.dtype))
    out[:, 3] = torch.minimum(out[:, 3], clamp_h.to(out.dtype))
    return out


__all__ = ['MGVLF_IMAGE_SIZE', 'mgvlf_letterbox', 'mgvlf_gt_boxes', 'mgvlf_clamp_predictions']
