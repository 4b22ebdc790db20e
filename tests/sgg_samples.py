"""Random scene-graph samples for differential tests: the same image as a metric input dict (SPEC 1)
and as plain Python lists for the loop reference."""
from typing import Optional, Tuple

import numpy as np
import torch


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


def random_image(rng: np.random.Generator, idx: int, mode: str, num_classes: int = 4, num_predicates: int = 5,
                 int_boxes: bool = True, score_format: str = 'bg', max_objects: int = 7,
                 empty_pred_prob: float = 0.1, tie_prob: float = 0.3,
                 fixed_pairs: Optional[int] = None) -> Tuple[dict, dict]:
    """``fixed_pairs``: every image gets ``max_objects`` GT objects, ``2 * max_objects`` detections (SGDet /
    PhrDet) and exactly that many predicted pairs (fixed-size model outputs, the stacked batch path)."""
    m = max_objects if fixed_pairs else int(rng.integers(0, max_objects + 1))
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
    r = len(pairs)
    width = num_predicates + 1 if score_format == 'bg' else num_predicates
    scores = rng.random((r, width)).astype(np.float32)
    if rng.random() < tie_prob:
        scores = np.round(scores * 4) / 4  # many exact ties
    scores = scores.astype(np.float32)
    rel_labels = None
    if score_format == 'single':
        rel_labels = rng.integers(0, num_predicates, size=r)
        scores = np.round(rng.random(r).astype(np.float32) * 8) / 8
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
    ref = dict(gt_boxes=[list(map(float, np.float32(b))) for b in gt_boxes], gt_labels=[int(x) for x in gt_labels],
               gt_rels=rels, pred_boxes=[list(map(float, np.float32(b))) for b in pred_boxes],
               pred_labels=[int(x) for x in pred_labels], pred_scores=[float(x) for x in pred_scores],
               rel_pairs=[tuple(map(int, p)) for p in pairs],
               rel_scores=[float(x) for x in scores] if score_format == 'single' else [list(map(float, row)) for row in scores],
               rel_labels=None if rel_labels is None else [int(x) for x in rel_labels])
    return sample, ref


def random_dataset(seed: int, count: int, mode: str, **kwargs):
    rng = np.random.default_rng(seed)
    pairs = [random_image(rng, i, mode, **kwargs) for i in range(count)]
    return [p[0] for p in pairs], [p[1] for p in pairs]
