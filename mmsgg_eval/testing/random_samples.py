"""Random scene-graph data samples, for the tests' differential checks and the benchmark workloads (one module:
no test file and no workload draws its own).

Two families, both seeded by a ``numpy.random.Generator`` (the same generator state gives the same samples):

* small adversarial images (:func:`random_image`, :func:`random_dataset`): a few objects on a 100-pixel scale,
  ties, duplicate GT triplets, several predicates on one pair, overlapping same-class boxes, images without
  predictions; every mode ('predcls', 'sgcls', 'sgdet', 'phrdet'), score layouts with and without the
  background column or a single label per pair, optional segmentation masks (``masks=True``, for
  ``match='mask'``). Each comes with the same image as plain Python lists for a loop reference;
* VG150-like building blocks (:func:`gt_objects`, :func:`detections`, :func:`relation_scores`,
  :func:`all_pairs`, :func:`long_tail_probs`): long-tailed labels and predicates on image-sized boxes, which
  :mod:`mmsgg_eval.benchmarks.workloads` assembles into its fixed and variable workloads.

Boxes are xyxy pixels; labels, predicates and pair indices 0-based; masks [N, H, W] bool in the image frame.
Only tests and :mod:`mmsgg_eval.benchmarks` import this module (the package itself never does).
"""
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

#: class and predicate counts of the VG150-like building blocks (the sizes of VG150)
VG_CLASSES, VG_PREDICATES = 150, 50
#: side of the canvas of :func:`random_image`'s masks (its boxes lie within about 115 pixels)
MASK_SIZE = 120


# ---------------------------------------------------------------------------- small adversarial images
def _boxes(rng, n, int_boxes, size=100.0):
    xy = rng.uniform(0, size * 0.7, size=(n, 2))
    wh = rng.uniform(0, size * 0.4, size=(n, 2))
    b = np.concatenate([xy, xy + wh], 1)
    return np.round(b) if int_boxes else b.astype(np.float32)


def _jitter(rng, boxes, int_boxes, scale=4.0):
    d = rng.uniform(-scale, scale, size=boxes.shape)
    b = boxes + d
    b[:, 2:] = np.maximum(b[:, 2:], b[:, :2])
    return np.round(b) if int_boxes else b.astype(np.float32)


def _gt_graph(rng: np.random.Generator, m: int, int_boxes: bool, num_classes: int, num_predicates: int):
    """``m`` GT boxes and labels (overlapping same-class pairs) and the GT relations (duplicates, several
    predicates on one pair)."""
    gt_boxes = _boxes(rng, m, int_boxes)
    if m >= 2 and rng.random() < 0.5:  # same-class overlapping boxes -> many-to-many matches
        gt_boxes[1] = _jitter(rng, gt_boxes[:1], int_boxes, 1.0)[0]
    gt_labels = rng.integers(0, num_classes, size=m)
    if m >= 2 and rng.random() < 0.5:
        gt_labels[1] = gt_labels[0]
    rels = []
    if m >= 2:
        for _ in range(int(rng.integers(0, 8))):
            s, o = rng.choice(m, 2, replace=False)
            rels.append((int(s), int(o), int(rng.integers(0, num_predicates))))
        if rels and rng.random() < 0.5:  # duplicate GT triplet
            rels.append(rels[0])
        if rels and rng.random() < 0.5:  # several predicates on one pair
            rels.append((rels[0][0], rels[0][1], int((rels[0][2] + 1) % num_predicates)))
    return gt_boxes, gt_labels, rels


def _predicted_objects(rng: np.random.Generator, mode: str, gt_boxes: np.ndarray, gt_labels: np.ndarray,
                       int_boxes: bool, num_classes: int, max_objects: int, fixed_pairs: Optional[int]):
    """The objects a model gives: the GT boxes with mostly right labels (PredCls / SGCls), else detections
    near the GT objects; with their scores (0.1 steps: ties)."""
    m = len(gt_boxes)
    if mode in ('predcls', 'sgcls'):
        n = m
        pred_boxes = gt_boxes
        pred_labels = np.where(rng.random(m) < 0.7, gt_labels, rng.integers(0, num_classes, size=m))
    else:
        n = 2 * max_objects if fixed_pairs else int(rng.integers(0, 2 * max_objects + 1))
        src = gt_boxes[rng.integers(0, m, size=n)] if m else _boxes(rng, n, int_boxes)
        pred_boxes = _jitter(rng, src, int_boxes) if n else np.zeros((0, 4))
        pred_labels = rng.integers(0, num_classes, size=n)
        if m and n:
            pick = rng.integers(0, m, size=n)
            near = rng.random(n) < 0.7
            pred_boxes[near] = _jitter(rng, gt_boxes[pick[near]], int_boxes, 2.0)
            pred_labels[near] = gt_labels[pick[near]]
    pred_scores = np.round(rng.uniform(0.1, 1.0, size=n), 1).astype(np.float32)
    return pred_boxes, pred_labels, pred_scores


def _predicted_pairs(rng: np.random.Generator, n: int, fixed_pairs: Optional[int], empty_pred_prob: float):
    """Ordered pairs of the ``n`` predicted objects (a repeated pair sometimes, none sometimes)."""
    all_pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    if fixed_pairs:
        chosen = rng.choice(len(all_pairs), min(fixed_pairs, len(all_pairs)), replace=False)
        pairs = [all_pairs[i] for i in chosen]
        pairs = [pairs[i % len(pairs)] for i in range(fixed_pairs)]  # repeated pairs when there are too few
    elif all_pairs and rng.random() > empty_pred_prob:
        take = int(rng.integers(1, len(all_pairs) + 1))
        chosen = rng.choice(len(all_pairs), take, replace=False)
        pairs = [all_pairs[i] for i in chosen]
        if rng.random() < 0.2 and pairs:
            pairs.append(pairs[0])  # same pair twice
    else:
        pairs = []
    return pairs


def _pair_scores(rng: np.random.Generator, r: int, score_format: str, num_predicates: int, tie_prob: float):
    """[r, P + 1] / [r, P] score rows (exact ties sometimes), or one label and score per pair ('single')."""
    width = num_predicates + 1 if score_format == 'bg' else num_predicates
    scores = rng.random((r, width)).astype(np.float32)
    if rng.random() < tie_prob:
        scores = np.round(scores * 4) / 4  # many exact ties
    scores = scores.astype(np.float32)
    rel_labels = None
    if score_format == 'single':
        rel_labels = rng.integers(0, num_predicates, size=r)
        scores = np.round(rng.random(r).astype(np.float32) * 8) / 8
    return scores, rel_labels


def random_image(rng: np.random.Generator, idx: int, mode: str, num_classes: int = 4, num_predicates: int = 5,
                 int_boxes: bool = True, score_format: str = 'bg', max_objects: int = 7,
                 empty_pred_prob: float = 0.1, tie_prob: float = 0.3,
                 fixed_pairs: Optional[int] = None, masks: bool = False) -> Tuple[dict, dict]:
    """One image: ``(sample, ref)``, the metric input dict and the same image as plain lists (``gt_boxes``,
    ``gt_labels``, ``gt_rels`` (subject, object, predicate), ``pred_boxes``, ``pred_labels``, ``pred_scores``,
    ``rel_pairs``, ``rel_scores``, ``rel_labels``; with ``masks`` also ``gt_masks`` / ``pred_masks`` arrays).

    ``score_format``: 'bg' ([R, P + 1], column 0 = no relation), 'nobg' ([R, P]) or 'single' (one label and
    score per pair). ``fixed_pairs``: every image gets ``max_objects`` GT objects, ``2 * max_objects``
    detections (SGDet / PhrDet) and exactly that many predicted pairs (fixed-size model outputs, the stacked
    batch path). ``masks``: GT masks (and predicted masks in SGDet) from :func:`box_masks`, drawn
    last, so the image is otherwise the same with or without them (the next images of a dataset are not)."""
    m = max_objects if fixed_pairs else int(rng.integers(0, max_objects + 1))
    gt_boxes, gt_labels, rels = _gt_graph(rng, m, int_boxes, num_classes, num_predicates)
    pred_boxes, pred_labels, pred_scores = _predicted_objects(rng, mode, gt_boxes, gt_labels, int_boxes,
                                                              num_classes, max_objects, fixed_pairs)
    pairs = _predicted_pairs(rng, len(pred_labels), fixed_pairs, empty_pred_prob)
    scores, rel_labels = _pair_scores(rng, len(pairs), score_format, num_predicates, tie_prob)
    sample = dict(
        sample_idx=idx, img_id=f'img{idx}',
        gt_instances=dict(bboxes=torch.tensor(gt_boxes, dtype=torch.float32).reshape(-1, 4),
                          labels=torch.tensor(gt_labels, dtype=torch.long)),
        gt_relations=dict(pair_idxs=torch.tensor([x[:2] for x in rels], dtype=torch.long).reshape(-1, 2),
                          labels=torch.tensor([x[2] for x in rels], dtype=torch.long)),
        pred_relations=dict(pair_idxs=torch.tensor(pairs, dtype=torch.long).reshape(-1, 2),
                            scores=torch.tensor(scores, dtype=torch.float32)),
    )
    if rel_labels is not None:
        sample['pred_relations']['labels'] = torch.tensor(rel_labels, dtype=torch.long)
    if mode != 'predcls':
        sample['pred_instances'] = dict(bboxes=torch.tensor(pred_boxes, dtype=torch.float32).reshape(-1, 4),
                                        labels=torch.tensor(pred_labels, dtype=torch.long),
                                        scores=torch.tensor(pred_scores))
    gt_masks = pred_masks = None
    if masks:
        gt_masks = box_masks(rng, np.asarray(gt_boxes).reshape(-1, 4))
        sample['gt_instances']['masks'] = torch.from_numpy(gt_masks)
        if mode in ('sgdet', 'phrdet'):
            pred_masks = box_masks(rng, np.asarray(pred_boxes).reshape(-1, 4))
            sample['pred_instances']['masks'] = torch.from_numpy(pred_masks)
    ref = dict(gt_boxes=[list(map(float, np.float32(b))) for b in gt_boxes], gt_labels=[int(x) for x in gt_labels],
               gt_rels=rels, pred_boxes=[list(map(float, np.float32(b))) for b in pred_boxes],
               pred_labels=[int(x) for x in pred_labels], pred_scores=[float(x) for x in pred_scores],
               rel_pairs=[tuple(map(int, p)) for p in pairs],
               rel_scores=[float(x) for x in scores] if score_format == 'single' else [list(map(float, row)) for row in scores],
               rel_labels=None if rel_labels is None else [int(x) for x in rel_labels])
    if masks:
        ref.update(gt_masks=gt_masks, pred_masks=pred_masks)
    return sample, ref


def random_dataset(seed: int, count: int, mode: str, **kwargs) -> Tuple[List[dict], List[dict]]:
    """``count`` images of :func:`random_image` (``sample_idx`` 0..count-1) from ``default_rng(seed)``:
    ``(samples, refs)``."""
    rng = np.random.default_rng(seed)
    pairs = [random_image(rng, i, mode, **kwargs) for i in range(count)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def box_masks(rng: np.random.Generator, boxes: np.ndarray, size: int = MASK_SIZE,
              keep: float = 0.85) -> np.ndarray:
    """[N, size, size] bool: each box's pixels (rows y1..y2, columns x1..x2, rounded) with about 1 - ``keep`` of
    them dropped at random, so that mask IoU differs from box IoU."""
    out = np.zeros((len(boxes), size, size), dtype=bool)
    for i, box in enumerate(np.asarray(boxes, dtype=np.float64).reshape(-1, 4)):
        x1, y1, x2, y2 = (int(np.clip(round(v), 0, size - 1)) for v in box)
        out[i, y1:y2 + 1, x1:x2 + 1] = True
    return out & (rng.random(out.shape) < keep)



def add_box_shaped_masks(samples: List[dict], size: int = 100) -> None:
    """Give every GT and predicted object of ``samples`` (in place) a mask that is exactly its box as pixels of
    the +1 convention (rows y1..y2, columns x1..x2), its box first clamped to [0, size - 1] and rounded: mask
    matching then must equal +1 box matching."""
    for sample in samples:
        for field in ('gt_instances', 'pred_instances'):
            boxes = sample[field]['bboxes'].clamp(0, size - 1).round()
            sample[field]['bboxes'] = boxes
            masks = torch.zeros((boxes.shape[0], size, size), dtype=torch.bool)
            for i, (x1, y1, x2, y2) in enumerate(boxes.long().tolist()):
                masks[i, y1:y2 + 1, x1:x2 + 1] = True
            sample[field]['masks'] = masks

# ---------------------------------------------------------------------------- VG150-like building blocks
def long_tail_probs(n: int, alpha: float = 1.2) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1) ** alpha
    return p / p.sum()


def gt_objects(rng: np.random.Generator, m: int, num_classes: int = VG_CLASSES):
    """``m`` GT boxes (integer-valued xyxy, float32), their labels and sizes (for detection jitter)."""
    size = rng.uniform(400, 1024, size=2)
    xy = rng.uniform(0, 0.7, size=(m, 2)) * size
    wh = rng.uniform(0.05, 0.3, size=(m, 2)) * size
    gt_boxes = np.round(np.concatenate([xy, xy + wh], 1)).astype(np.float32)
    gt_labels = rng.choice(num_classes, m, p=long_tail_probs(num_classes, 0.8))
    return gt_boxes, gt_labels, wh


def detections(rng: np.random.Generator, gt_boxes: np.ndarray, gt_labels: np.ndarray, wh: np.ndarray,
               n: int, num_classes: int = VG_CLASSES) -> Dict[str, np.ndarray]:
    """``n`` detections: jittered GT boxes, the GT label 60% of the time (else uniform), uniform scores."""
    src = rng.integers(0, len(gt_boxes), size=n)
    jitter = rng.normal(0, 0.08, size=(n, 4)) * np.concatenate([wh[src], wh[src]], 1)
    det_boxes = gt_boxes[src] + jitter
    det_boxes[:, 2:] = np.maximum(det_boxes[:, 2:], det_boxes[:, :2] + 1)
    det_labels = np.where(rng.random(n) < 0.6, gt_labels[src], rng.integers(0, num_classes, n))
    return dict(bboxes=det_boxes.astype(np.float32), labels=det_labels,
                scores=rng.uniform(0.05, 1, n).astype(np.float32))


def relation_scores(rng: np.random.Generator, num_pairs: int, background: bool = True,
                    num_predicates: int = VG_PREDICATES) -> np.ndarray:
    """Softmax scores with long-tailed predicate priors: [R, P+1] (column 0 = no relation, favoured) or,
    without ``background``, [R, P] (the same logits, softmax over the predicates only)."""
    logits = rng.normal(0, 1, size=(num_pairs, num_predicates + 1)).astype(np.float32)
    logits[:, 0] += 2.0
    logits[:, 1:] += np.log(long_tail_probs(num_predicates)).astype(np.float32) * 0.5
    if not background:
        logits = logits[:, 1:]
    scores = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return scores.astype(np.float32)


def all_pairs(n: int) -> np.ndarray:
    """All ordered pairs (s, o), s != o, of ``n`` objects, [n (n - 1), 2] in row-major order."""
    sub, obj = np.nonzero(~np.eye(n, dtype=bool))
    return np.stack([sub, obj], 1)
