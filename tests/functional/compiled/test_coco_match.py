"""COCO's per-image matching (``functional.detection.coco_match_detections``): the compiled kernel
``coco_match_images`` (orders, IoU and the greedy loop image by image) against the torch operations, bit for bit, on
random padded batches with tied IoUs and scores, several classes, ignored GT boxes (areas outside the range),
unmatchable GT boxes, the +1 widths and the float32 detection sizes, empty images and images without GT; and a
loop reference of the greedy rule written from ``COCOeval.evaluateImg`` on one batch."""
import numpy as np
import pytest
import torch

from mmsgg_eval.functional import compiled
from mmsgg_eval.functional.detection import COCO_IOU_THRESHOLDS, coco_box_iou, coco_match_detections, coco_precision

needs_kernels = pytest.mark.skipif(not compiled.built() or compiled.kernels() is None
                                   or not hasattr(compiled.kernels(), 'coco_match_images'),
                                   reason='the compiled kernels (with coco_match_images) are not built')


def random_batch(rng, batch, dets, gts, classes):
    """Detections copied from GT boxes, some duplicated (exact ties of IoU) or shrunk, jittered or random; scores with ties; some GT boxes
    far larger than the rest (ignored with a small area range) and padding on both sides."""
    gt = rng.uniform(0, 50, (batch, gts, 2))
    gt = np.concatenate([gt, gt + rng.uniform(1, 30, (batch, gts, 2))], -1).round(1)
    gt[rng.uniform(size=(batch, gts)) < 0.15] *= 4  # large boxes: ignored with area_range below
    gt_labels = rng.integers(0, classes, (batch, gts))
    twin = rng.uniform(size=(batch, gts))
    for b, g in zip(*np.nonzero(twin < 0.6)):
        if g:  # duplicated boxes (exact ties of IoU) and shrunk copies (IoU 0.72, areas on both sides of 200)
            corner, size = gt[b, g - 1, :2], gt[b, g - 1, 2:] - gt[b, g - 1, :2]
            scale = 1.0 if twin[b, g] < 0.3 else 0.85
            gt[b, g] = np.concatenate([corner, corner + size * scale])
            gt_labels[b, g] = gt_labels[b, g - 1]
    det_labels = rng.integers(0, classes, (batch, dets))
    det = rng.uniform(0, 60, (batch, dets, 4))
    if gts:
        src = rng.integers(0, gts, (batch, dets))
        det = np.take_along_axis(gt, src[..., None].repeat(4, -1), 1)
        det = det + rng.normal(0, 3, det.shape) * (rng.uniform(size=(batch, dets, 1)) < 0.6)
        det_labels = np.where(rng.uniform(size=(batch, dets)) < 0.8, np.take_along_axis(gt_labels, src, 1),
                              det_labels)
    det[..., 2:] = np.maximum(det[..., 2:], det[..., :2])
    return dict(det_boxes=torch.tensor(det), det_scores=torch.tensor(rng.integers(0, 4, (batch, dets)) / 4.0),
                det_labels=torch.tensor(det_labels), det_valid=torch.tensor(rng.uniform(size=(batch, dets)) < 0.85),
                gt_boxes=torch.tensor(gt), gt_labels=torch.tensor(gt_labels),
                gt_valid=torch.tensor(rng.uniform(size=(batch, gts)) < 0.85))


def match(case, compiled_on, **kwargs):
    with compiled.disabled() if not compiled_on else torch.no_grad():
        return coco_match_detections(**case, **kwargs)


@needs_kernels
@pytest.mark.parametrize('seed', range(8))
def test_kernel_equals_torch(seed):
    rng = np.random.default_rng(seed)
    for dets, gts in ((7, 5), (1, 9), (12, 1), (0, 3), (4, 0)):
        case = random_batch(rng, 6, dets, gts, classes=1 + seed % 3)
        unmatchable = torch.tensor(rng.uniform(size=(6, gts)) < 0.2)
        for plus_one, f32, area in ((False, False, (0.0, 1e10)), (True, True, (0.0, 1500.0)),
                                    (True, False, (30.0, 1500.0)), (False, False, (0.0, 200.0))):
            kwargs = dict(num_classes=3, plus_one=plus_one, float32_det_sizes=f32, max_dets=3 + seed % 5,
                          gt_unmatchable=unmatchable, area_range=area)
            ours, ref = match(case, True, **kwargs), match(case, False, **kwargs)
            assert ours.keys() == ref.keys()
            for key in ref:
                assert torch.equal(ours[key], ref[key]), (key, dets, gts, plus_one, f32, area)


@needs_kernels
def test_iou_exactly_at_the_lowest_threshold():
    """A detection whose IoU with the GT box of its class is exactly 0.5 (the lowest threshold: used there), one at
    0.75 and one just below 0.5 (never used), without and with the +1 widths: the kernel equals the torch
    operations and matches each box at the thresholds its IoU reaches."""
    for plus_one, gt, boxes in (
            (False, [[0.0, 0.0, 10.0, 10.0], [20.0, 0.0, 40.0, 10.0]],
             [[0.0, 0.0, 5.0, 10.0], [20.0, 0.0, 35.0, 10.0], [0.0, 0.0, 4.99, 10.0]]),
            (True, [[0.0, 0.0, 9.0, 9.0], [20.0, 0.0, 39.0, 9.0]],
             [[0.0, 0.0, 4.0, 9.0], [20.0, 0.0, 34.0, 9.0], [0.0, 0.0, 3.99, 9.0]])):
        case = dict(det_boxes=torch.tensor([boxes], dtype=torch.float64),
                    det_scores=torch.tensor([[0.9, 0.8, 0.7]], dtype=torch.float64),
                    det_labels=torch.tensor([[0, 1, 0]]), det_valid=torch.ones(1, 3, dtype=torch.bool),
                    gt_boxes=torch.tensor([gt], dtype=torch.float64), gt_labels=torch.tensor([[0, 1]]),
                    gt_valid=torch.ones(1, 2, dtype=torch.bool))
        iou = coco_box_iou(case['det_boxes'][0], case['gt_boxes'][0], plus_one)
        assert iou[0, 0] == 0.5 and iou[1, 1] == 0.75 and iou[2, 0] < 0.5, iou
        kwargs = dict(num_classes=2, plus_one=plus_one, float32_det_sizes=False, max_dets=10)
        ours, ref = match(case, True, **kwargs), match(case, False, **kwargs)
        for key in ref:
            assert torch.equal(ours[key], ref[key]), (key, plus_one)
        matched = ours['matched'][0]  # rows in evaluation order: the scores keep the given order
        assert matched[0, :2].tolist() == [True, False] and matched[1, :2].tolist() == [True, True]
        assert not matched[2].any()


@needs_kernels
def test_kernel_against_the_greedy_rule():
    """One batch by a loop written from ``COCOeval.evaluateImg`` (regular boxes before ignored ones, the highest
    IoU, the later box on ties; a taken box is not taken again at that threshold)."""
    rng = np.random.default_rng(11)
    case = random_batch(rng, 4, 9, 6, classes=2)
    area = (0.0, 200.0)  # about half of the boxes ignored: regular and ignored candidates of one detection
    out = match(case, True, num_classes=2, area_range=area)
    thrs = [min(float(t), 1 - 1e-10) for t in COCO_IOU_THRESHOLDS]
    for b in range(4):
        order = out['order'][b].tolist()
        gt_area = (case['gt_boxes'][b, :, 2:] - case['gt_boxes'][b, :, :2]).prod(-1)
        gt_ignored = ((gt_area < area[0]) | (gt_area > area[1])).tolist()
        gts = sorted((g for g in range(6) if case['gt_valid'][b, g]), key=lambda g: gt_ignored[g])  # stable
        for t, thr in enumerate(thrs):
            taken = set()
            for pos, d in enumerate(order):
                if not out['kept'][b, pos]:
                    continue
                iou = coco_box_iou(case['det_boxes'][b, d][None], case['gt_boxes'][b][gts])[0].tolist()
                best, best_iou = None, min(thr, 1 - 1e-10)
                for j, g in enumerate(gts):
                    if g in taken or int(case['gt_labels'][b, g]) != int(case['det_labels'][b, d]):
                        continue
                    if best is not None and not gt_ignored[best] and gt_ignored[g]:
                        break  # a regular box was found: ignored boxes are not looked at
                    if iou[j] < best_iou:
                        continue
                    best, best_iou = g, iou[j]
                det_area = float((case['det_boxes'][b, d, 2:] - case['det_boxes'][b, d, :2]).prod())
                if best is not None:
                    taken.add(best)
                    want_ignored = gt_ignored[best]
                else:  # unmatched: ignored when its own area is outside the range
                    want_ignored = det_area < area[0] or det_area > area[1]
                assert bool(out['matched'][b, pos, t]) == (best is not None), (b, pos, t)
                assert bool(out['ignored'][b, pos, t]) == want_ignored, (b, pos, t)


@needs_kernels
@pytest.mark.parametrize('seed', range(6))
def test_precision_table_kernel_equals_torch(seed):
    """``coco_precision`` (COCOeval.accumulate) class by class in the kernel against the torch loop, bit for bit:
    tied scores, ignored rows, classes without GT boxes, classes with GT boxes and no detection, no row at all."""
    rng = np.random.default_rng(seed)
    classes = 1 + seed
    for rows in (0, 1, 7, 300):
        scores = torch.tensor(rng.integers(0, 5, rows) / 5.0)
        labels = torch.tensor(rng.integers(0, classes, rows))
        matched = torch.tensor(rng.uniform(size=(rows, 10)) < 0.5)
        ignored = torch.tensor(rng.uniform(size=(rows, 10)) < 0.1)
        gt_counts = torch.tensor(rng.integers(0, 40, classes) * (rng.uniform(size=classes) < 0.8))
        ours = coco_precision(scores, labels, matched, ignored, gt_counts)
        with compiled.disabled():
            ref = coco_precision(scores, labels, matched, ignored, gt_counts)
        assert ours.dtype == ref.dtype == np.float64 and ours.shape == ref.shape == (10, 101, classes)
        np.testing.assert_array_equal(ours.view(np.int64), ref.view(np.int64))
