"""A per-image numpy implementation of the Open Images relation protocol, in the style of the evaluator that
OIv6 papers run (PySGG's ``eval_rel_results`` + ``ap_eval``): one Python pass per image to build its list and
match it, then per predicate a Python loop over the dataset's entries in score order (VOC greedy claims, one IoU
call per entry). Written from the protocol's definition (``docs/metrics.md``), not from that code; used by
tools/benchmark.py as the "what people run today" peer of ``OIRelationMetric`` (the benchmark prints both
results: the keys agree on tie-free data).
"""
from functools import reduce
from typing import Dict, List, Sequence

import numpy as np

LENGTH, PER_PAIR, MIN_SCORE = 100, 2, np.float32(1e-5)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """+1-pixel float32 IoU of one xyxy box with [n, 4] boxes."""
    one = np.float32(1)
    box, boxes = box.astype(np.float32), boxes.astype(np.float32)
    wh = np.clip(np.minimum(box[2:], boxes[:, 2:]) - np.maximum(box[:2], boxes[:, :2]) + one, 0, None)
    inter = wh[:, 0] * wh[:, 1]
    area = (box[2] - box[0] + one) * (box[3] - box[1] + one)
    areas = (boxes[:, 2] - boxes[:, 0] + one) * (boxes[:, 3] - boxes[:, 1] + one)
    return inter / (area + areas - inter)


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.concatenate([np.minimum(a[:, :2], b[:, :2]), np.maximum(a[:, 2:], b[:, 2:])], 1)


def _image_list(im: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The image's OI list: 2 best predicates per pair, score (s * o) * p, top 100, > 1e-5."""
    pairs, scores = im['rel_pairs'], im['rel_scores']  # [R, 2], [R, P] (no background column)
    labels_sorted = np.argsort(-scores, axis=1, kind='stable')[:, :PER_PAIR]
    probs = np.take_along_axis(scores, labels_sorted, 1)
    so = im['pred_scores'][pairs[:, 0]] * im['pred_scores'][pairs[:, 1]]
    spo = so[:, None] * probs
    flat = np.argsort(-spo.ravel(), kind='stable')[:LENGTH]
    row, slot = np.unravel_index(flat, spo.shape)
    keep = spo[row, slot] > MIN_SCORE
    row, slot = row[keep], slot[keep]
    sub, obj = pairs[row, 0], pairs[row, 1]
    return dict(score=spo[row, slot], predicate=labels_sorted[row, slot], sub_box=im['pred_boxes'][sub],
                obj_box=im['pred_boxes'][obj], sub_label=im['pred_labels'][sub], obj_label=im['pred_labels'][obj])


def evaluate_oi(images: Sequence[Dict[str, np.ndarray]], num_predicates: int) -> Dict[str, float]:
    """R@20/50/100, mAP_rel, wmAP_rel, mAP_phr, wmAP_phr, final_score, w_final_score (percent) of numpy inputs
    (``rel_scores`` [R, P] without the background column; see tools/benchmark.py)."""
    hits = {k: 0 for k in (20, 50, 100)}
    total = 0
    dets: List[Dict[str, np.ndarray]] = []
    gts: List[Dict[str, np.ndarray]] = []
    for im in images:
        lst = _image_list(im)
        gt_sub, gt_obj = im['gt_pairs'][:, 0], im['gt_pairs'][:, 1]
        gt = dict(predicate=im['gt_predicates'], sub_box=im['gt_boxes'][gt_sub], obj_box=im['gt_boxes'][gt_obj],
                  sub_label=im['gt_labels'][gt_sub], obj_label=im['gt_labels'][gt_obj])
        det_trip = np.column_stack([lst['sub_label'], lst['predicate'], lst['obj_label']])
        gt_trip = np.column_stack([gt['sub_label'], gt['predicate'], gt['obj_label']])
        same = (gt_trip[:, None, :] == det_trip[None, :, :]).all(-1)
        pred_to_gt: List[List[int]] = [[] for _ in range(len(det_trip))]
        for g in np.where(same.any(1))[0]:
            cand = np.where(same[g])[0]
            ok = (_iou(gt['sub_box'][g], lst['sub_box'][cand]) >= 0.5) & \
                 (_iou(gt['obj_box'][g], lst['obj_box'][cand]) >= 0.5)
            for j in cand[ok]:
                pred_to_gt[j].append(int(g))
        total += len(gt_trip)
        for k in hits:
            hits[k] += len(reduce(np.union1d, pred_to_gt[:k])) if pred_to_gt else 0
        dets.append(lst)
        gts.append(gt)
    npos = np.array([sum(int((g['predicate'] == c).sum()) for g in gts) for c in range(num_predicates)])
    ap = {'rel': np.zeros(num_predicates), 'phr': np.zeros(num_predicates)}
    for c in range(num_predicates):
        rows = [(float(d['score'][j]), i, j) for i, d in enumerate(dets) for j in np.where(d['predicate'] == c)[0]]
        rows.sort(key=lambda r: (-r[0], r[1], r[2]))
        for kind in ('rel', 'phr'):
            claimed = set()
            tp = np.zeros(len(rows))
            for n, (_, i, j) in enumerate(rows):
                d, g = dets[i], gts[i]
                cand = np.where((g['predicate'] == c) & (g['sub_label'] == d['sub_label'][j]) &
                                (g['obj_label'] == d['obj_label'][j]))[0]
                if not len(cand):
                    continue
                if kind == 'rel':
                    ov = np.minimum(_iou(d['sub_box'][j], g['sub_box'][cand]),
                                    _iou(d['obj_box'][j], g['obj_box'][cand]))
                else:
                    ov = _iou(_union(d['sub_box'][j:j + 1], d['obj_box'][j:j + 1])[0],
                              _union(g['sub_box'][cand], g['obj_box'][cand]))
                best = int(np.argmax(ov))
                if ov[best] > 0.5 and (i, int(cand[best])) not in claimed:
                    claimed.add((i, int(cand[best])))
                    tp[n] = 1
            if npos[c] == 0 or not len(rows):
                continue
            ctp = np.cumsum(tp)
            rec = ctp / npos[c]
            prec = ctp / np.arange(1, len(rows) + 1)
            mrec, mpre = np.concatenate([[0.], rec, [1.]]), np.concatenate([[0.], prec, [0.]])
            for t in range(len(mpre) - 1, 0, -1):
                mpre[t - 1] = max(mpre[t - 1], mpre[t])
            steps = np.where(mrec[1:] != mrec[:-1])[0]
            ap[kind][c] = float(np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]))
    share = npos / max(int(npos.sum()), 1)
    out = {f'R@{k}': 100.0 * hits[k] / max(total, 1) for k in hits}
    for kind in ('rel', 'phr'):
        out[f'mAP_{kind}'] = 100.0 * float(ap[kind].mean())
        out[f'wmAP_{kind}'] = 100.0 * float((ap[kind] * share).sum())
    out['final_score'] = 0.2 * out['R@50'] + 0.4 * out['mAP_rel'] + 0.4 * out['mAP_phr']
    out['w_final_score'] = 0.2 * out['R@50'] + 0.4 * out['wmAP_rel'] + 0.4 * out['wmAP_phr']
    return out
