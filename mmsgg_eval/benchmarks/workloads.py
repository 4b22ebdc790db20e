"""Seeded synthetic scene-graph workloads that look like VG150 (150 classes, 50 long-tailed predicates).

Fixed sizes (every image alike):

* ``triplets``: 25 GT objects, 12 GT relations (some duplicate GT), 80 detections, 100 ranked pairs with
  51-column score rows per image (SGDet input).
* ``sgdet-full``: 80 detections, all 6,320 ordered pairs with 51-column score matrices.
* ``predcls-full``: the 25 GT boxes, all 600 ordered pairs.

Variable sizes, as real datasets and detectors give them (drawn per image):

* ``variable``: GT objects ~ Poisson(25) (at least 2), GT relations ~ Poisson(12) (at least 1, between
  distinct objects, duplicates possible), 80 detections, 100-1,000 distinct candidate pairs (uniform),
  scores [R, P+1] (column 0 = no relation);
* ``variable-nobg``: the same distributions with scores [R, P] (no background column: a softmax over the
  predicates only);
* ``variable-256``: the same GT distributions and 80 detections with a fixed budget of 256 distinct candidate
  pairs per image (as relation heads that keep their top-256 pairs give), scores [R, P];
* ``sgdet-variable``: the same GT distributions, 20-80 detections (uniform) and all their ordered pairs,
  scores [R, P+1].

Open Images V6-like (600 classes, 30 long-tailed predicates; evaluated with ``OIRelationMetric``):

* ``oiv6-sgdet``: GT objects ~ Poisson(8) (at least 2), GT relations ~ Poisson(5) (at least 1, several on one
  pair possible), 80 detections and all 6,320 ordered pairs with 31-column scores [R, P+1].

Boxes are xyxy pixels; labels and pair indices 0-based. The random draws are
:mod:`mmsgg_eval.testing.random_samples`' (shared with the tests).
"""
from typing import Dict, Iterator, List

import numpy as np
import torch

from ..testing.random_samples import (VG_CLASSES, VG_PREDICATES, all_pairs, detections, gt_objects,  # noqa: F401
                                      long_tail_probs, relation_scores)

NUM_CLASSES, NUM_PREDICATES = VG_CLASSES, VG_PREDICATES
OI_NUM_CLASSES, OI_NUM_PREDICATES = 600, 30
FIXED_WORKLOADS = ('triplets', 'sgdet-full', 'predcls-full')
VARIABLE_WORKLOADS = ('variable', 'variable-nobg', 'variable-256', 'sgdet-variable')
OI_WORKLOADS = ('oiv6-sgdet',)
WORKLOADS = FIXED_WORKLOADS + VARIABLE_WORKLOADS + OI_WORKLOADS
ZEROSHOT_TRIPLETS = [(0, 1, 2), (3, 4, 5)]
"""The zero-shot (subject, object, predicate) class triplets the benchmarked metrics are given (so that every
zR@K key is computed)."""


def workload_mode(workload: str) -> str:
    """The evaluation mode of a workload: PredCls for ``predcls-full`` (GT boxes), SGDet for the others."""
    return 'predcls' if workload == 'predcls-full' else 'sgdet'


def make_image(rng: np.random.Generator, idx: int, workload: str, device: str = 'cpu') -> Dict:
    """One image of a fixed-size workload."""
    m, g = 25, 12
    gt_boxes, gt_labels, wh = gt_objects(rng, m)
    pairs = np.stack([rng.choice(m, 2, replace=False) for _ in range(g)])
    preds = rng.choice(NUM_PREDICATES, g, p=long_tail_probs(NUM_PREDICATES))
    rels = np.concatenate([pairs, preds[:, None]], 1)
    rels[-2:] = rels[:2]  # duplicate GT triplets, as in the VG150 test split
    sample = dict(sample_idx=idx, img_id=idx,
                  gt_instances=dict(bboxes=gt_boxes, labels=gt_labels),
                  gt_relations=dict(pair_idxs=rels[:, :2], labels=rels[:, 2]))
    if workload == 'predcls-full':
        rel_pairs = all_pairs(m)
    else:
        n = 80
        sample['pred_instances'] = detections(rng, gt_boxes, gt_labels, wh, n)
        if workload == 'sgdet-full':
            rel_pairs = all_pairs(n)
        else:
            rel_pairs = np.stack([rng.choice(n, 2, replace=False) for _ in range(100)])
    sample['pred_relations'] = dict(pair_idxs=rel_pairs, scores=relation_scores(rng, len(rel_pairs)))
    return to_torch(sample, device)


def make_variable_image(rng: np.random.Generator, idx: int, workload: str, device: str = 'cpu') -> Dict:
    """One image of a variable-size workload (see the module docstring)."""
    m = max(int(rng.poisson(25)), 2)
    g = max(int(rng.poisson(12)), 1)
    gt_boxes, gt_labels, wh = gt_objects(rng, m)
    sub = rng.integers(0, m, size=g)
    obj = (sub + rng.integers(1, m, size=g)) % m  # never the subject itself
    preds = rng.choice(NUM_PREDICATES, g, p=long_tail_probs(NUM_PREDICATES))
    n = int(rng.integers(20, 81)) if workload == 'sgdet-variable' else 80
    rel_pairs = all_pairs(n)
    if workload != 'sgdet-variable':  # distinct candidate pairs, in the detector's (pair index) order
        count = 256 if workload == 'variable-256' else int(rng.integers(100, 1001))
        rel_pairs = rel_pairs[np.sort(rng.choice(len(rel_pairs), count, replace=False))]
    sample = dict(sample_idx=idx, img_id=idx,
                  gt_instances=dict(bboxes=gt_boxes, labels=gt_labels),
                  gt_relations=dict(pair_idxs=np.stack([sub, obj], 1), labels=preds),
                  pred_instances=detections(rng, gt_boxes, gt_labels, wh, n),
                  pred_relations=dict(pair_idxs=rel_pairs, scores=relation_scores(
                      rng, len(rel_pairs), background=workload not in ('variable-nobg', 'variable-256'))))
    return to_torch(sample, device)


def make_oi_image(rng: np.random.Generator, idx: int, workload: str, device: str = 'cpu') -> Dict:
    """One image of an Open Images V6-like workload (see the module docstring)."""
    m = max(int(rng.poisson(8)), 2)
    g = max(int(rng.poisson(5)), 1)
    gt_boxes, gt_labels, wh = gt_objects(rng, m, OI_NUM_CLASSES)
    sub = rng.integers(0, m, size=g)
    obj = (sub + rng.integers(1, m, size=g)) % m
    preds = rng.choice(OI_NUM_PREDICATES, g, p=long_tail_probs(OI_NUM_PREDICATES))
    n = 80
    rel_pairs = all_pairs(n)
    sample = dict(sample_idx=idx, img_id=idx,
                  gt_instances=dict(bboxes=gt_boxes, labels=gt_labels),
                  gt_relations=dict(pair_idxs=np.stack([sub, obj], 1), labels=preds),
                  pred_instances=detections(rng, gt_boxes, gt_labels, wh, n, OI_NUM_CLASSES),
                  pred_relations=dict(pair_idxs=rel_pairs, scores=relation_scores(
                      rng, len(rel_pairs), num_predicates=OI_NUM_PREDICATES)))
    return to_torch(sample, device)


def to_torch(sample: Dict, device: str) -> Dict:
    out = {}
    for k, v in sample.items():
        if isinstance(v, dict):
            out[k] = {kk: torch.as_tensor(vv).to(device) for kk, vv in v.items()}
        else:
            out[k] = v
    return out


def iter_workload(workload: str, num_images: int, seed: int = 0, device: str = 'cpu') -> Iterator[Dict]:
    """The images of a workload one at a time (the same images as :func:`make_workload`)."""
    if workload not in WORKLOADS:
        raise ValueError(f'unknown workload {workload!r}; choose from {WORKLOADS}')
    rng = np.random.default_rng(seed)
    make = make_variable_image if workload in VARIABLE_WORKLOADS else \
        make_oi_image if workload in OI_WORKLOADS else make_image
    for i in range(num_images):
        yield make(rng, i, workload, device)


def make_workload(workload: str, num_images: int, seed: int = 0, device: str = 'cpu') -> List[Dict]:
    return list(iter_workload(workload, num_images, seed, device))


def meta(workload: str = 'triplets') -> Dict:
    """The ``dataset_meta`` of a workload's metrics."""
    if workload in OI_WORKLOADS:
        return dict(classes=[f'class{i}' for i in range(OI_NUM_CLASSES)],
                    predicates=[f'predicate{i}' for i in range(OI_NUM_PREDICATES)], dataset_name='synthetic OIv6-like',
                    iou_plus_one=True)
    return dict(classes=[f'class{i}' for i in range(NUM_CLASSES)],
                predicates=[f'predicate{i}' for i in range(NUM_PREDICATES)], dataset_name='synthetic VG150-like',
                iou_plus_one=True)
