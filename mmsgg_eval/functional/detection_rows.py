"""COCO AP@50 of flat rows (one row per detection / GT box, with its image id), as the VLM metric keeps them:
the rows are grouped by image, padded a few images at a time and scored by :mod:`.detection` (COCO's
per-image matching and precision integration, equal to pycocotools' ``COCOeval``)."""
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from .detection import coco_match_detections, coco_precision, coco_summary
from .scores import lengths_mask, pad_rows

__all__ = ['coco_ap50', 'AP_CHUNK_ENTRIES']


def coco_ap50(gt_rows: Dict[str, np.ndarray], pred_rows: Dict[str, np.ndarray], image_ids: Sequence[int],
              num_classes: int, plus_one: bool = False, max_dets: int = 100) -> float:
    """COCO AP at IoU 0.5 (``COCOeval`` ``stats[1]``, area 'all'), as a fraction; NaN when there is no GT
    object, 0 when there is no prediction.

    ``gt_rows``: ``image`` [M], ``box`` [M, 4] xyxy pixels, ``label`` [M] 0-based; ``pred_rows`` the same
    plus ``score`` [N]. Every id of ``image_ids`` is evaluated, in increasing order (images without GT objects
    still yield false positives); rows of other images and labels outside [0, ``num_classes``) are not
    evaluated. Within an image the rows keep their order (ties in score: the earlier row first). ``plus_one``:
    widths / heights are ``x2 - x1 + 1`` (legacy VG150 convention). ``max_dets``: detections kept per image and
    class; below 10 it acts as 10 (COCOeval sorts its ``maxDets`` ``[1, 10, max_dets]`` and uses the largest).
    Float64 throughout; the same value as ``COCOeval`` bit for bit (tests/metrics/test_vlm.py).
    """
    gt = {k: torch.as_tensor(np.asarray(v)) for k, v in gt_rows.items()}
    pred = {k: torch.as_tensor(np.asarray(v)) for k, v in pred_rows.items()}
    if gt['image'].numel() == 0:
        return float('nan')
    if pred['image'].numel() == 0:
        return 0.0
    images = torch.unique(torch.as_tensor(list(image_ids), dtype=torch.long))  # sorted, as COCOeval's imgIds
    if images.numel() == 0:
        return float('nan')
    det, det_counts = _rows_by_image(pred, images, num_classes, ('score',))
    truth, gt_counts = _rows_by_image(gt, images, num_classes)
    kept_rows: Dict[str, List[torch.Tensor]] = {k: [] for k in ('scores', 'labels', 'matched', 'ignored')}
    num_gt = torch.zeros(num_classes, dtype=torch.long)
    for lo, hi in _image_chunks(det_counts, gt_counts):  # images in order: the rows stay in image order
        d, g = _padded(det, det_counts, lo, hi), _padded(truth, gt_counts, lo, hi)
        out = coco_match_detections(d['box'].double(), d['score'].double(), d['label'], d['valid'],
                                    g['box'].double(), g['label'], g['valid'], num_classes,
                                    plus_one=plus_one, max_dets=max(int(max_dets), 10))
        for key, parts in kept_rows.items():
            parts.append(out[key][out['kept']])
        num_gt += out['gt_counts'].sum(0)
    precision = coco_precision(*(torch.cat(kept_rows[k]) for k in ('scores', 'labels', 'matched', 'ignored')),
                               num_gt)
    ap = coco_summary(precision)['AP@50']
    return float('nan') if ap < 0 else ap


#: Padded (detection, GT box) entries per matching call of :func:`coco_ap50` (bounds the float64 IoU tensor).
AP_CHUNK_ENTRIES = 1 << 22


def _rows_by_image(rows: Dict[str, torch.Tensor], images: torch.Tensor, num_classes: int,
                   extra: Sequence[str] = ()) -> Tuple[Dict[str, torch.Tensor], List[int]]:
    """``box`` [N, 4], ``label`` [N] and the ``extra`` columns of the rows of the evaluated ``images`` (sorted
    ids) with a label in [0, C), grouped by image in that order (each image keeps its rows' order), and the
    number of rows of each image."""
    image = rows['image'].long().reshape(-1)
    label = rows['label'].long().reshape(-1)
    slot = torch.searchsorted(images, image).clamp(max=images.numel() - 1)
    keep = (images[slot] == image) & (label >= 0) & (label < num_classes)
    order = torch.sort(slot[keep], stable=True).indices
    columns = {'box': rows['box'].reshape(-1, 4), 'label': label}
    columns.update({c: rows[c].reshape(-1) for c in extra})
    return ({c: col[keep][order] for c, col in columns.items()},
            torch.bincount(slot[keep], minlength=images.numel()).tolist())


def _image_chunks(det_counts: Sequence[int], gt_counts: Sequence[int]) -> List[Tuple[int, int]]:
    """Consecutive image ranges [lo, hi) whose padded [images, detections, GT boxes] size stays within
    :data:`AP_CHUNK_ENTRIES` (at least one image each)."""
    chunks, lo, width_d, width_g = [], 0, 1, 1
    for i, (d, g) in enumerate(zip(det_counts, gt_counts)):
        wd, wg = max(width_d, d, 1), max(width_g, g, 1)
        if i > lo and (i + 1 - lo) * wd * wg > AP_CHUNK_ENTRIES:
            chunks.append((lo, i))
            lo, wd, wg = i, max(d, 1), max(g, 1)
        width_d, width_g = wd, wg
    chunks.append((lo, len(det_counts)))
    return chunks


def _padded(columns: Dict[str, torch.Tensor], counts: Sequence[int], lo: int, hi: int) -> Dict[str, torch.Tensor]:
    """The rows of images [lo, hi) as padded [hi - lo, L, ...] columns plus ``valid`` [hi - lo, L]."""
    start, lengths = sum(counts[:lo]), list(counts[lo:hi])
    rows = {c: col[start:start + sum(lengths)] for c, col in columns.items()}
    out = {c: pad_rows(col.split(lengths), 0.0) for c, col in rows.items()}
    out['valid'] = lengths_mask(lengths, max(lengths, default=0), torch.device('cpu'))
    return out
