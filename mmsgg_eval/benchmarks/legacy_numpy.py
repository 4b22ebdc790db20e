"""A per-image numpy implementation of the legacy protocol, in the style most SGG repositories carry.

Each image: build triplets, intersect label triplets, compute box IoUs per matched GT, union the hit lists
for every K. Used by tools/benchmark.py as the "what people run today" baseline; its numbers agree with
the metrics (the benchmark checks R@K and mR@K).
"""
from functools import reduce
from typing import Dict, List, Sequence

import numpy as np


def _iou_plus_one(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    box = box.astype(np.float32)
    boxes = boxes.astype(np.float32)
    one = np.float32(1)
    area = (box[2] - box[0] + one) * (box[3] - box[1] + one)
    areas = (boxes[:, 2] - boxes[:, 0] + one) * (boxes[:, 3] - boxes[:, 1] + one)
    wh = np.clip(np.minimum(box[2:], boxes[:, 2:]) - np.maximum(box[:2], boxes[:, :2]) + one, 0, None)
    inter = wh[:, 0] * wh[:, 1]
    return inter / (area + areas - inter)


def _matches(gt_trip, gt_boxes, pred_trip, pred_boxes, thr):
    keeps = (gt_trip[:, None, :] == pred_trip[None, :, :]).all(-1)
    pred_to_gt: List[List[int]] = [[] for _ in range(len(pred_trip))]
    for g in np.where(keeps.any(1))[0]:
        cand = np.where(keeps[g])[0]
        ok = (_iou_plus_one(gt_boxes[g, :4], pred_boxes[cand, :4]) >= thr) & \
             (_iou_plus_one(gt_boxes[g, 4:], pred_boxes[cand, 4:]) >= thr)
        for j in cand[ok]:
            pred_to_gt[j].append(int(g))
    return pred_to_gt


def _triplets(rels, labels, boxes):
    trip = np.column_stack([labels[rels[:, 0]], rels[:, 2], labels[rels[:, 1]]])
    return trip, np.column_stack([boxes[rels[:, 0]], boxes[rels[:, 1]]])


def evaluate_legacy(images: Sequence[Dict[str, np.ndarray]], num_predicates: int, ks=(20, 50, 100),
                    thr: float = 0.5, ng_topk: int = 100) -> Dict[str, float]:
    """R@K, ngR@K, mR@K, ngmR@K (percent), sgdet inputs as numpy arrays (see tools/benchmark.py);
    ``rel_scores`` [R, P] holds the predicate scores without the background column."""
    recall = {(n, k): [] for n in ('R', 'ngR') for k in ks}
    per_pred = {(n, k): [[] for _ in range(num_predicates)] for n in ('R', 'ngR') for k in ks}
    for im in images:
        gt_rels = np.column_stack([im['gt_pairs'], im['gt_predicates']])
        if len(gt_rels) == 0 or len(im['rel_pairs']) == 0:
            continue
        gt_trip, gt_tboxes = _triplets(gt_rels, im['gt_labels'], im['gt_boxes'])
        rel_scores = im['rel_scores']
        obj_s = im['pred_scores']
        pair_s = obj_s[im['rel_pairs'][:, 0]] * obj_s[im['rel_pairs'][:, 1]]
        gc_pred = rel_scores.argmax(1)
        gc_score = rel_scores.max(1) * obj_s[im['rel_pairs'][:, 0]] * obj_s[im['rel_pairs'][:, 1]]
        order = np.argsort(-gc_score, kind='stable')
        gc_rels = np.column_stack([im['rel_pairs'][order], gc_pred[order]])
        ng = pair_s[:, None] * rel_scores
        flat = np.argsort(-ng.ravel(), kind='stable')[:ng_topk]
        r_idx, p_idx = np.unravel_index(flat, ng.shape)
        ng_rels = np.column_stack([im['rel_pairs'][r_idx], p_idx])
        for name, rels in (('R', gc_rels), ('ngR', ng_rels)):
            trip, tboxes = _triplets(rels, im['pred_labels'], im['pred_boxes'])
            pred_to_gt = _matches(gt_trip, gt_tboxes, trip, tboxes, thr)
            for k in ks:
                match = reduce(np.union1d, pred_to_gt[:k])
                recall[(name, k)].append(len(match) / len(gt_rels))
                for p in np.unique(gt_rels[:, 2]):
                    n_p = (gt_rels[:, 2] == p).sum()
                    hit_p = sum(1 for g in match if gt_rels[int(g), 2] == p)
                    per_pred[(name, k)][p].append(hit_p / n_p)
    out = {}
    for k in ks:
        for name, mname in (('R', 'mR'), ('ngR', 'ngmR')):
            out[f'{name}@{k}'] = 100 * float(np.mean(recall[(name, k)])) if recall[(name, k)] else 0.0
            out[f'{mname}@{k}'] = 100 * sum(float(np.mean(v)) if v else 0.0
                                            for v in per_pred[(name, k)]) / num_predicates
    return out
