"""Slow, loop-based reference of the Open Images relation protocol, written from its definition
(docs/metrics.md, "OIRelationMetric") on the plain-list images of ``tests/sgg_samples.py``.

Every float that the protocol computes in float32 (scores, IoU) is computed here with numpy float32 scalars in
the stated order of operations; the AP sweep and the recalls are plain Python floats.
"""
from typing import Dict, List, Sequence, Tuple

import numpy as np

F = np.float32
LENGTH, PER_PAIR, MIN_SCORE = 100, 2, F(1e-5)


def iou(a: Sequence[float], b: Sequence[float], plus_one: bool = True) -> np.float32:
    """IoU of two xyxy boxes, float32, legacy +1 pixel: inter / (area_a + area_b - inter)."""
    one = F(1) if plus_one else F(0)
    w = max(F(F(min(F(a[2]), F(b[2])) - max(F(a[0]), F(b[0]))) + one), F(0))
    h = max(F(F(min(F(a[3]), F(b[3])) - max(F(a[1]), F(b[1]))) + one), F(0))
    inter = F(w * h)
    area_a = F(F(F(a[2]) - F(a[0]) + one) * F(F(a[3]) - F(a[1]) + one))
    area_b = F(F(F(b[2]) - F(b[0]) + one) * F(F(b[3]) - F(b[1]) + one))
    return F(inter / F(F(area_a + area_b) - inter))


def union(a: Sequence[float], b: Sequence[float]) -> List[float]:
    return [min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])]


def evaluated_objects(ref: dict, mode: str) -> Tuple[list, list, list]:
    """(boxes, labels, scores): PredCls the GT boxes and labels with scores 1, else the model's."""
    if mode == 'predcls':
        return ref['gt_boxes'], ref['gt_labels'], [1.0] * len(ref['gt_labels'])
    return ref['pred_boxes'], ref['pred_labels'], ref['pred_scores']


def oi_list(ref: dict, mode: str) -> List[dict]:
    """The image's OI ranked list: per pair row its two best predicates (background column 0 left out; ties:
    lower predicate first), score (s * o) * p in float32; ranked by score desc, then pair row, then slot; top
    100; entries <= 1e-5 dropped."""
    boxes, labels, scores = evaluated_objects(ref, mode)
    entries = []
    for r, (s, o) in enumerate(ref['rel_pairs']):
        row = [F(v) for v in ref['rel_scores'][r][1:]]
        best = sorted(range(len(row)), key=lambda c: (-row[c], c))[:PER_PAIR]
        so = F(F(scores[s]) * F(scores[o]))
        for slot, c in enumerate(best):
            entries.append({'score': F(so * row[c]), 'row': r, 'slot': slot, 'predicate': c,
                            'sub_box': boxes[s], 'obj_box': boxes[o], 'sub_label': labels[s], 'obj_label': labels[o]})
    entries.sort(key=lambda e: (-float(e['score']), e['row'], e['slot']))
    return [e for e in entries[:LENGTH] if e['score'] > MIN_SCORE]


def gt_relations(ref: dict) -> List[dict]:
    return [{'predicate': p, 'sub_box': ref['gt_boxes'][s], 'obj_box': ref['gt_boxes'][o],
             'sub_label': ref['gt_labels'][s], 'obj_label': ref['gt_labels'][o]} for s, o, p in ref['gt_rels']]


def voc_ap(tp: List[int], npos: int) -> float:
    """VOC all-point AP of a sorted sweep: precision envelope, sum of recall steps times the envelope."""
    if npos == 0:
        return 0.0
    ctp = cfp = 0
    rec, prec = [], []
    for t in tp:
        ctp += t
        cfp += 1 - t
        rec.append(ctp / npos)
        prec.append(ctp / (ctp + cfp))
    mrec, mpre = [0.0] + rec + [1.0], [0.0] + prec + [0.0]
    for i in range(len(mpre) - 2, -1, -1):
        mpre[i] = max(mpre[i], mpre[i + 1])
    return sum((mrec[i + 1] - mrec[i]) * mpre[i + 1] for i in range(len(mrec) - 1) if mrec[i + 1] != mrec[i])


def evaluate(refs: Sequence[dict], mode: str, num_predicates: int, ks: Sequence[int] = (20, 50, 100),
             plus_one: bool = True) -> Dict[str, object]:
    """Every key of the protocol (percent) and the per-predicate APs of the images ``refs``."""
    lists = [oi_list(ref, mode) for ref in refs]
    gts = [gt_relations(ref) for ref in refs]
    hits = {k: 0 for k in list(ks) + [50]}
    total = 0
    for entries, gt in zip(lists, gts):
        total += len(gt)
        for k in hits:
            matched = set()
            for e in entries[:k]:
                for g, rel in enumerate(gt):
                    if (e['predicate'], e['sub_label'], e['obj_label']) == (rel['predicate'], rel['sub_label'],
                                                                            rel['obj_label']) and \
                            iou(e['sub_box'], rel['sub_box'], plus_one) >= 0.5 and \
                            iou(e['obj_box'], rel['obj_box'], plus_one) >= 0.5:
                        matched.add(g)
            hits[k] += len(matched)
    recall = {k: hits[k] / total if total else 0.0 for k in hits}
    ap = {'rel': [], 'phr': []}
    npos = [sum(1 for gt in gts for rel in gt if rel['predicate'] == c) for c in range(num_predicates)]
    for kind in ('rel', 'phr'):
        for c in range(num_predicates):
            rows = [(i, rank, e) for i, entries in enumerate(lists) for rank, e in enumerate(entries)
                    if e['predicate'] == c]
            rows.sort(key=lambda x: (-float(x[2]['score']), x[0], x[1]))
            claimed = set()
            tp = []
            for i, _, e in rows:
                best, best_g = None, None
                for g, rel in enumerate(gts[i]):
                    if (rel['predicate'], rel['sub_label'], rel['obj_label']) != (c, e['sub_label'], e['obj_label']):
                        continue
                    if kind == 'rel':
                        ov = min(iou(e['sub_box'], rel['sub_box'], plus_one),
                                 iou(e['obj_box'], rel['obj_box'], plus_one))
                    else:
                        ov = iou(union(e['sub_box'], e['obj_box']), union(rel['sub_box'], rel['obj_box']), plus_one)
                    if best is None or ov > best:
                        best, best_g = ov, g
                if best is not None and best > 0.5 and (i, best_g) not in claimed:
                    claimed.add((i, best_g))
                    tp.append(1)
                else:
                    tp.append(0)
            ap[kind].append(voc_ap(tp, npos[c]))
    all_npos = sum(npos)
    out = {f'R@{k}': 100.0 * recall[k] for k in ks}
    for kind in ('rel', 'phr'):
        out[f'mAP_{kind}'] = 100.0 * sum(ap[kind]) / num_predicates
        out[f'wmAP_{kind}'] = 100.0 * (sum(a * n / all_npos for a, n in zip(ap[kind], npos)) if all_npos else 0.0)
    out['final_score'] = 0.2 * 100.0 * recall[50] + 0.4 * out['mAP_rel'] + 0.4 * out['mAP_phr']
    out['w_final_score'] = 0.2 * 100.0 * recall[50] + 0.4 * out['wmAP_rel'] + 0.4 * out['wmAP_phr']
    return {'keys': out, 'ap_rel': ap['rel'], 'ap_phr': ap['phr'], 'npos': npos, 'lists': lists}
