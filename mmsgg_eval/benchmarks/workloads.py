"""Seeded synthetic scene-graph workloads that look like VG150 (150 classes, 50 long-tailed predicates).

* ``triplets``: 25 GT objects, 12 GT relations (some duplicate GT), 80 detections, 100 ranked pairs with
  51-column score rows per image (SGDet input).
* ``sgdet-full``: 80 detections, all 6,320 ordered pairs with 51-column score matrices.
* ``predcls-full``: the 25 GT boxes, all 600 ordered pairs.
"""
from typing import Dict, List

import numpy as np
import torch

NUM_CLASSES, NUM_PREDICATES = 150, 50
WORKLOADS = ('triplets', 'sgdet-full', 'predcls-full')


def long_tail_probs(n: int, alpha: float = 1.2) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1) ** alpha
    return p / p.sum()


def make_image(rng: np.random.Generator, idx: int, workload: str, device: str = 'cpu') -> Dict:
    m, g = 25, 12
    size = rng.uniform(400, 1024, size=2)
    xy = rng.uniform(0, 0.7, size=(m, 2)) * size
    wh = rng.uniform(0.05, 0.3, size=(m, 2)) * size
    gt_boxes = np.round(np.concatenate([xy, xy + wh], 1)).astype(np.float32)
    gt_labels = rng.choice(NUM_CLASSES, m, p=long_tail_probs(NUM_CLASSES, 0.8))
    pairs = np.stack([rng.choice(m, 2, replace=False) for _ in range(g)])
    preds = rng.choice(NUM_PREDICATES, g, p=long_tail_probs(NUM_PREDICATES))
    rels = np.concatenate([pairs, preds[:, None]], 1)
    rels[-2:] = rels[:2]  # duplicate GT triplets, as in the VG150 test split
    sample = dict(sample_idx=idx, img_id=idx,
                  gt_instances=dict(bboxes=gt_boxes, labels=gt_labels),
                  gt_relations=dict(pair_idxs=rels[:, :2], labels=rels[:, 2]))
    if workload == 'predcls-full':
        n = m
        sub, obj = np.nonzero(~np.eye(n, dtype=bool))
        rel_pairs = np.stack([sub, obj], 1)
    else:
        n = 80
        src = rng.integers(0, m, size=n)
        jitter = rng.normal(0, 0.08, size=(n, 4)) * np.concatenate([wh[src], wh[src]], 1)
        det_boxes = gt_boxes[src] + jitter
        det_boxes[:, 2:] = np.maximum(det_boxes[:, 2:], det_boxes[:, :2] + 1)
        det_labels = np.where(rng.random(n) < 0.6, gt_labels[src], rng.integers(0, NUM_CLASSES, n))
        sample['pred_instances'] = dict(bboxes=det_boxes.astype(np.float32), labels=det_labels,
                                        scores=rng.uniform(0.05, 1, n).astype(np.float32))
        if workload == 'sgdet-full':
            sub, obj = np.nonzero(~np.eye(n, dtype=bool))
            rel_pairs = np.stack([sub, obj], 1)
        else:
            rel_pairs = np.stack([rng.choice(n, 2, replace=False) for _ in range(100)])
    logits = rng.normal(0, 1, size=(len(rel_pairs), NUM_PREDICATES + 1)).astype(np.float32)
    logits[:, 0] += 2.0
    logits[:, 1:] += np.log(long_tail_probs(NUM_PREDICATES)).astype(np.float32) * 0.5
    scores = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    sample['pred_relations'] = dict(pair_idxs=rel_pairs, scores=scores.astype(np.float32))
    return to_torch(sample, device)


def to_torch(sample: Dict, device: str) -> Dict:
    out = {}
    for k, v in sample.items():
        if isinstance(v, dict):
            out[k] = {kk: torch.as_tensor(vv).to(device) for kk, vv in v.items()}
        else:
            out[k] = v
    return out


def make_workload(workload: str, num_images: int, seed: int = 0, device: str = 'cpu') -> List[Dict]:
    if workload not in WORKLOADS:
        raise ValueError(f'unknown workload {workload!r}; choose from {WORKLOADS}')
    rng = np.random.default_rng(seed)
    return [make_image(rng, i, workload, device) for i in range(num_images)]


def meta() -> Dict:
    return dict(classes=[f'class{i}' for i in range(NUM_CLASSES)],
                predicates=[f'predicate{i}' for i in range(NUM_PREDICATES)], dataset_name='synthetic VG150-like',
                iou_plus_one=True)
