"""The per-image input diagnostics (``functional.diagnostics.image_diagnostics``): the box-frame flags and the
label-offset counts of a padded batch, by the compiled kernel (one pass over the images) and by the torch
operations, each against a loop reference written from the definitions (module docstring of
``mmsgg_eval.functional.diagnostics``) in float32, with unknown / zero / NaN image sizes, boxes on and just past
the tolerance, images shrunk to exactly the downscale limit, normalised boxes, padding, empty images and images
whose labels are not checked; and the metric's diagnostic rows with the kernels on and off."""
import contextlib

import numpy as np
import pytest
import torch

from mmsgg_eval.functional import compiled
from mmsgg_eval.functional.transfer import sync_free_paths
from mmsgg_eval.testing.host_syncs import HostSyncCounter
from mmsgg_eval.functional.diagnostics import (BOX_TOLERANCE_PX, BOX_TOLERANCE_REL, DOWNSCALE_LIMIT, LABEL_IOU,
                                               UNIT_MIN_IMAGE_SIDE, image_diagnostics)

needs_kernels = pytest.mark.skipif(not compiled.built() or compiled.kernels() is None
                                   or not hasattr(compiled.kernels(), 'image_diagnostics'),
                                   reason='the compiled kernels (with image_diagnostics) are not built')

f32 = np.float32


def _tol(extent):
    """The box tolerance of an image side (pixels, float32 as the metric rounds it)."""
    return f32(BOX_TOLERANCE_PX) + f32(BOX_TOLERANCE_REL) * extent


def _reference(pred_boxes, pred_labels, gt_boxes, gt_labels, original, resized, label_images, plus_one):
    """Loop reference: per image, the flags of the module docstring and the four label counts."""
    flags, offsets = [], []
    extra = f32(1.0 if plus_one else 0.0)
    for b in range(pred_boxes.shape[0]):
        ow, oh = (f32(v) for v in original[b])
        rw, rh = (f32(v) for v in resized[b])
        real = [n for n in range(pred_boxes.shape[1]) if pred_labels[b, n] >= 0]
        known = np.isfinite(ow) and np.isfinite(oh) and ow > 0 and oh > 0
        w, h = (ow, oh) if known else (f32(1), f32(1))

        def inside(box, ew, eh):
            tw, th = _tol(ew), _tol(eh)
            return box[0] >= -tw and box[1] >= -th and box[2] <= ew + tw and box[3] <= eh + th

        boxes = [[f32(v) for v in pred_boxes[b, n]] for n in real]
        checked = known and len(boxes) > 0
        flag = 0
        if checked:
            flag |= 1
            outside = sum(not inside(box, w, h) for box in boxes)
            flag |= 2 if 2 * outside > len(boxes) else 0
            ratios = [rw / w, rh / h]
            ratio = f32('nan') if any(r != r for r in ratios) else max(ratios)
            if np.isfinite(ratio) and ratio <= f32(DOWNSCALE_LIMIT):
                flag |= 8
                flag |= 4 if all(inside(box, rw, rh) for box in boxes) else 0
            unit = all(0 <= v <= 1 for box in boxes for v in box)
            flag |= 16 if unit and w > UNIT_MIN_IMAGE_SIDE and h > UNIT_MIN_IMAGE_SIDE else 0
        flags.append(flag)
        counts = [0, 0, 0, 0]
        if label_images[b]:
            for n in real:
                a = [f32(v) for v in pred_boxes[b, n]]
                area_a = ((a[2] - a[0]) + extra) * ((a[3] - a[1]) + extra)
                hit = [False] * 4
                for m in range(gt_boxes.shape[1]):
                    if gt_labels[b, m] < 0:
                        continue
                    g = [f32(v) for v in gt_boxes[b, m]]
                    iw = max((min(a[2], g[2]) - max(a[0], g[0])) + extra, f32(0))
                    ih = max((min(a[3], g[3]) - max(a[1], g[1])) + extra, f32(0))
                    inter = iw * ih
                    area_g = ((g[2] - g[0]) + extra) * ((g[3] - g[1]) + extra)
                    with np.errstate(invalid='ignore', divide='ignore'):
                        iou = inter / ((area_a + area_g) - inter)
                    if not iou >= f32(LABEL_IOU):
                        continue
                    hit[0] = True
                    for column, offset in ((1, 0), (2, -1), (3, 1)):
                        hit[column] = hit[column] or pred_labels[b, n] + offset == gt_labels[b, m]
                for column in range(4):
                    counts[column] += hit[column]
        offsets.append(counts)
    return torch.tensor(flags, dtype=torch.uint8), torch.tensor(offsets, dtype=torch.int32).reshape(-1, 4)


def _batch(seed, batch=24, num_pred=9, num_gt=6):
    """A padded batch of awkward images (see the module docstring)."""
    g = np.random.default_rng(seed)
    sizes = g.integers(20, 400, (batch, 2)).astype(np.float32)
    gt = np.concatenate([g.random((batch, num_gt, 2)) * sizes[:, None] * 0.7, np.zeros((batch, num_gt, 2))], 2)
    gt[..., 2:] = gt[..., :2] + g.random((batch, num_gt, 2)) * sizes[:, None] * 0.3 + 1
    gt = gt.astype(np.float32)
    pick = g.integers(0, num_gt, (batch, num_pred))
    pred = np.take_along_axis(gt, pick[..., None].repeat(4, 2), 1) + g.normal(0, 3, (batch, num_pred, 4))
    pred[..., 2:] = np.maximum(pred[..., 2:], pred[..., :2])
    pred = pred.astype(np.float32)
    gt_labels = g.integers(0, 5, (batch, num_gt))
    shifted = g.integers(-1, 2, (batch, num_pred)) * (g.random((batch, num_pred)) < 0.5)  # labels off by one
    pred_labels = np.take_along_axis(gt_labels, pick, 1) + shifted
    pred_labels = np.maximum(pred_labels, 0)
    resized = sizes.copy()
    for b in range(batch):
        kind = b % 12
        if kind == 1:  # boxes in the resized frame of a shrunk image: they fit it
            resized[b] = sizes[b] * f32(0.5)
            pred[b] *= f32(0.5)
        elif kind == 2:  # an upscaled image's network frame: boxes reach outside the original
            resized[b] = sizes[b] * 2
            pred[b] *= 2
        elif kind == 3:  # normalised boxes
            pred[b] = np.clip(pred[b] / np.concatenate([sizes[b], sizes[b]]), 0, 1)
        elif kind == 4:  # unknown original size
            sizes[b] = np.nan
        elif kind == 5:  # a zero side, a negative side
            sizes[b] = (0, 50) if b % 2 else (-3, 40)
        elif kind == 6:  # shrunk to exactly the limit (in float32), boxes on the tolerance edge of that frame
            resized[b] = sizes[b] * f32(DOWNSCALE_LIMIT)
            rw, rh = resized[b]
            tw, th = _tol(rw), _tol(rh)
            pred[b] = [0, 0, rw, rh]
            pred[b, 0] = [-tw, -th, rw + tw, rh + th]
            if b % 24 == 18:  # one float32 step past the tolerance
                pred[b, 1, 2] = np.nextafter(rw + tw, f32(np.inf))
        elif kind == 7:  # unknown resized size
            resized[b] = np.nan
        elif kind == 8:  # boxes on, and one step past, the original frame's tolerance
            w, h = sizes[b]
            tw, th = _tol(w), _tol(h)
            pred[b, : num_pred // 2] = [-tw, -th, w + tw, h + th]
            pred[b, num_pred // 2:] = [np.nextafter(-tw, f32(-np.inf)), 0, w, h]
        elif kind == 9:  # a tiny image (sides <= 16) with normalised-looking boxes
            sizes[b] = (16, 12)
            pred[b] = np.clip(g.random((num_pred, 4)), 0, 1).astype(np.float32)
            pred[b, :, 2:] = np.maximum(pred[b, :, 2:], pred[b, :, :2])
    pred_labels = torch.from_numpy(pred_labels.astype(np.int64))
    gt_labels = torch.from_numpy(gt_labels.astype(np.int64))
    pred_labels[torch.from_numpy(g.random((batch, num_pred)) < 0.15)] = -1  # padding among the predictions
    pred_labels[10 % batch] = -1  # an image without predicted objects
    gt_labels[torch.from_numpy(g.random((batch, num_gt)) < 0.15)] = -1
    label_images = torch.from_numpy(g.random(batch) < 0.7)
    return (torch.from_numpy(pred), pred_labels, torch.from_numpy(gt), gt_labels, torch.from_numpy(sizes),
            torch.from_numpy(resized), label_images)


@pytest.mark.parametrize('path', ['cpu', 'sync-free'])  # the checked images selected / all counted, then zeroed
@pytest.mark.parametrize('seed', [0, 1, 2])
@pytest.mark.parametrize('plus_one', [False, True])
def test_torch_path_equals_the_loop_reference(seed, plus_one, path):
    args = _batch(seed)
    with compiled.disabled(), sync_free_paths() if path == 'sync-free' else contextlib.nullcontext(), \
            HostSyncCounter() as syncs:
        flags, offsets = image_diagnostics(*args, plus_one)
    assert path == 'cpu' or syncs.total == 0, syncs.report()
    ref_flags, ref_offsets = _reference(*(a.numpy() for a in args), plus_one)
    assert flags.dtype == torch.uint8 and offsets.dtype == torch.int32
    assert torch.equal(flags, ref_flags) and torch.equal(offsets, ref_offsets)
    assert {int(f) for f in flags} >= {0, 1, 3, 13, 17}  # every flag is exercised (checked, outside, fits, unit)


@needs_kernels
@pytest.mark.parametrize('seed', [0, 1, 2, 3])
@pytest.mark.parametrize('plus_one', [False, True])
def test_kernel_equals_the_torch_path_and_the_reference(seed, plus_one):
    args = _batch(seed)
    flags, offsets = image_diagnostics(*args, plus_one)
    with compiled.disabled():
        t_flags, t_offsets = image_diagnostics(*args, plus_one)
    assert flags.dtype == torch.uint8 and offsets.dtype == torch.int32 and offsets.shape == (len(flags), 4)
    assert torch.equal(flags, t_flags) and torch.equal(offsets, t_offsets)
    ref_flags, ref_offsets = _reference(*(a.numpy() for a in args), plus_one)
    assert torch.equal(flags, ref_flags) and torch.equal(offsets, ref_offsets)


@needs_kernels
@pytest.mark.parametrize('shape', [(0, 3, 2), (3, 0, 2), (3, 4, 0), (1, 1, 1), (9, 17, 11)])
def test_kernel_on_empty_and_odd_shapes(shape):
    batch, num_pred, num_gt = shape
    g = torch.Generator().manual_seed(sum(shape))
    pred = torch.rand(batch, num_pred, 4, generator=g) * 50
    pred[..., 2:] += pred[..., :2]
    gt = torch.rand(batch, num_gt, 4, generator=g) * 50
    gt[..., 2:] += gt[..., :2]
    args = (pred, torch.randint(-1, 3, (batch, num_pred), generator=g), gt,
            torch.randint(-1, 3, (batch, num_gt), generator=g), torch.full((batch, 2), 90.0),
            torch.full((batch, 2), 60.0), torch.ones(batch, dtype=torch.bool))
    flags, offsets = image_diagnostics(*args, True)
    with compiled.disabled():
        t_flags, t_offsets = image_diagnostics(*args, True)
    assert torch.equal(flags, t_flags) and torch.equal(offsets, t_offsets)


@needs_kernels
def test_kernel_refuses_bad_arguments_naming_the_field():
    run = compiled.kernels().image_diagnostics
    args = dict(pred_boxes=torch.rand(2, 3, 4), pred_labels=torch.zeros(2, 3, dtype=torch.long),
                gt_boxes=torch.rand(2, 4, 4), gt_labels=torch.zeros(2, 4, dtype=torch.long),
                original=torch.ones(2, 2), resized=torch.ones(2, 2), label_images=torch.ones(2, dtype=torch.bool),
                label_iou=0.5, plus_one=False, tolerance_px=1.0, tolerance_rel=0.005, downscale_limit=0.8,
                unit_min_side=16.0, flag_bits=[1, 2, 4, 8, 16])
    run(**args)
    for field, value, words in (('pred_boxes', torch.rand(2, 3, 4).double(), 'pred_boxes must be float32'),
                                ('gt_labels', torch.zeros(2, 4, dtype=torch.int32), 'gt_labels must be int64'),
                                ('label_images', torch.ones(3, dtype=torch.bool), 'matching shapes'),
                                ('original', torch.ones(2, 3), 'matching shapes'),
                                ('flag_bits', [1, 2, 4], 'flag_bits must be the 5 flag values')):
        with pytest.raises(RuntimeError, match=words):
            run(**dict(args, **{field: value}))


@pytest.mark.parametrize('workload', ['sgdet-variable', 'variable'])
def test_metric_diagnostic_rows_with_the_kernels_on_and_off(workload):
    """The images table of a pool (box flags, label offsets, every other column) is the same whichever path
    computes the diagnostics."""
    from mmsgg_eval.benchmarks.workloads import make_workload, meta
    from mmsgg_eval.metrics import SGRecall
    samples = make_workload(workload, 40, seed=3)
    for i, s in enumerate(samples):  # image sizes: original, half of it, and one unknown
        s['ori_shape'] = (480, 640)
        if i % 3 == 0:
            s['img_shape'] = (240, 320)
        elif i % 3 == 1:
            s['scale_factor'] = (0.5, 0.5)
    del samples[5]['ori_shape']

    def rows():
        metric = SGRecall(mode='sgdet')
        metric.dataset_meta = meta(workload)
        return metric.compute_rows(list(samples))['images']
    on = rows()
    with compiled.disabled():
        off = rows()
    assert on.keys() == off.keys()
    for name in on:
        assert torch.equal(on[name], off[name]), name
    assert int((on['label_offsets'][:, 0] > 0).sum()) > 10 and int((on['box_flags'] & 1).sum()) == 39


@pytest.mark.parametrize('seed', [0, 1])
@pytest.mark.parametrize('plus_one', [False, True])
def test_label_offsets_of_every_image(seed, plus_one):
    """label_offsets (DetectionAP's diagnostic: every image checked) equals the reference with every image marked,
    whichever path computes it."""
    from mmsgg_eval.functional.diagnostics import label_offsets
    pred, pred_labels, gt, gt_labels, original, resized, _ = _batch(seed)
    every = torch.ones(len(pred), dtype=torch.bool)
    expected = _reference(pred.numpy(), pred_labels.numpy(), gt.numpy(), gt_labels.numpy(), original.numpy(),
                          resized.numpy(), every.numpy(), plus_one)[1]
    assert torch.equal(label_offsets(pred, pred_labels, gt, gt_labels, plus_one), expected)
    with compiled.disabled():
        assert torch.equal(label_offsets(pred, pred_labels, gt, gt_labels, plus_one), expected)


def test_detection_ap_label_offsets_with_the_kernels_on_and_off():
    from mmsgg_eval.benchmarks.workloads import make_workload, meta
    from mmsgg_eval.metrics import DetectionAP
    samples = make_workload('variable', 24, seed=5)

    def rows():
        metric = DetectionAP()
        metric.dataset_meta = meta('variable')
        return metric.compute_rows(list(samples))
    on = rows()
    with compiled.disabled():
        off = rows()
    for table in on:
        for name in on[table]:
            assert torch.equal(on[table][name], off[table][name]), (table, name)
    assert int(on['images']['label_offsets'][:, 0].sum()) > 50
