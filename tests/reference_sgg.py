"""Slow, obviously-correct reference of the legacy Scene-Graph-Benchmark protocol (R@K, ngR@K, zR@K,
mR@K, A@K), written from its definition.

Plain Python loops over images, predictions and GT relations; numpy float32 scalars reproduce the legacy
float32 arithmetic (IoU and triplet scores) so threshold decisions are identical. Not used by the package.

Objects per mode, as in the legacy evaluator: PredCls uses the GT boxes and labels with object scores 1 (the
predicted pair indices index that list); SGCls the model's boxes (``pred_boxes``; the GT boxes only when the
sample has none) with the predicted labels and scores; SGDet / PhrDet everything predicted.
"""
from typing import Dict, List, Optional, Sequence

import numpy as np

NAN = float('nan')  # the value of a key whose subset, group or family has no GT relation

f32 = np.float32


def iou(a, b, plus_one: bool) -> np.float32:
    extra = f32(1.0) if plus_one else f32(0.0)
    a = [f32(v) for v in a]
    b = [f32(v) for v in b]
    area_a = (a[2] - a[0] + extra) * (a[3] - a[1] + extra)
    area_b = (b[2] - b[0] + extra) * (b[3] - b[1] + extra)
    w = max(min(a[2], b[2]) - max(a[0], b[0]) + extra, f32(0.0))
    h = max(min(a[3], b[3]) - max(a[1], b[1]) + extra, f32(0.0))
    inter = f32(w * h)
    union = f32(area_a + area_b - inter)
    if union == 0:
        return f32(0.0)
    return f32(inter / union)


def mask_iou(a, b) -> np.float32:
    """IoU of two binary masks from its definition: |A and B| / |A or B| pixels (0 for two empty masks)."""
    inter = int(np.logical_and(a, b).sum())
    union = int(np.logical_or(a, b).sum())
    return f32(inter / union) if union else f32(0.0)


def union_box(a, b):
    return [min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])]


def image_lists(s: dict, mode: str, ng_topk: int, rank: str, num_predicates: int):
    """Graph-constrained and no-graph-constraint lists of (subject idx, object idx, predicate)."""
    gt_boxes, gt_labels = s['gt_boxes'], s['gt_labels']
    if mode == 'predcls':
        boxes, labels, obj_scores = gt_boxes, gt_labels, [1.0] * len(gt_boxes)
    elif mode == 'sgcls':
        boxes = s['pred_boxes'] if s.get('pred_boxes') is not None else gt_boxes
        labels, obj_scores = s['pred_labels'], s['pred_scores']
    else:
        boxes, labels, obj_scores = s['pred_boxes'], s['pred_labels'], s['pred_scores']
    pairs, scores = s['rel_pairs'], s['rel_scores']
    cands = []  # per pair: list of (predicate, prob) candidates
    for r in range(len(pairs)):
        row = scores[r]
        if s.get('rel_labels') is not None:
            cands.append([(int(s['rel_labels'][r]), f32(row))])
        else:
            probs = list(row[1:]) if len(row) == num_predicates + 1 else list(row)
            cands.append([(p, f32(v)) for p, v in enumerate(probs)])
    gc = []
    for r, (sub, obj) in enumerate(pairs):
        best_p, best_v = None, None
        for p, v in cands[r]:
            if best_v is None or v > best_v:
                best_p, best_v = p, v
        score = f32(f32(best_v * f32(obj_scores[sub])) * f32(obj_scores[obj]))
        gc.append((score, r, sub, obj, best_p))
    if rank == 'score':
        gc = sorted(gc, key=lambda t: -float(t[0]))  # Python's sort is stable
    ngc = []
    for r, (sub, obj) in enumerate(pairs):
        pair_score = f32(f32(obj_scores[sub]) * f32(obj_scores[obj]))
        for p, v in cands[r]:
            ngc.append((f32(pair_score * v), r, sub, obj, p))
    ngc = sorted(ngc, key=lambda t: -float(t[0]))[:ng_topk]
    return boxes, labels, [t[1:] for t in gc], [t[1:] for t in ngc]


def hits_of(pred, s, boxes, labels, thr, plus_one, phrase, masks=None):
    """GT relations hit by one listed prediction. ``masks``: (predicted, GT) masks for mask matching (PSG: the
    subject's and the object's mask IoU instead of the box IoU)."""
    _, sub, obj, p = pred
    out = set()
    for g, (gs, go, gp) in enumerate(s['gt_rels']):
        if (labels[sub], p, labels[obj]) != (s['gt_labels'][gs], gp, s['gt_labels'][go]):
            continue
        if masks is not None:
            ok = mask_iou(masks[0][sub], masks[1][gs]) >= thr and mask_iou(masks[0][obj], masks[1][go]) >= thr
        elif phrase:
            ok = iou(union_box(boxes[sub], boxes[obj]), union_box(s['gt_boxes'][gs], s['gt_boxes'][go]),
                     plus_one) >= thr
        else:
            ok = iou(boxes[sub], s['gt_boxes'][gs], plus_one) >= thr and \
                iou(boxes[obj], s['gt_boxes'][go], plus_one) >= thr
        if ok:
            out.add(g)
    return out


def reference_metrics(samples: Sequence[dict], num_predicates: int, mode: str = 'predcls',
                      ks: Sequence[int] = (20, 50, 100), thr: float = 0.5, plus_one: bool = False,
                      ng_topk: int = 100, rank: str = 'score', skip_empty: bool = True,
                      mr_average: str = 'all', recall_average: str = 'image',
                      zeroshot: Optional[set] = None, groups: Optional[Dict[str, List[int]]] = None,
                      match: str = 'box') -> dict:
    """All keys in percent (R, ngR, zR, ngzR, A, mR, ngmR, group mR, F, AVG). ``zeroshot``: set of 0-based (subject class, object class, predicate).
    ``match='mask'``: objects match by mask IoU (``gt_masks``; the predicted objects' ``pred_masks`` in SGDet,
    the GT masks in PredCls / SGCls, whose objects are the GT's)."""
    phrase = mode == 'phrdet'
    rec = {('R', k): [] for k in ks}
    rec.update({('ngR', k): [] for k in ks})
    zrec = {(n, k): [] for n in ('zR', 'ngzR') for k in ks}
    per_pred = {(n, k, p): [] for n in ('mR', 'ngmR') for k in ks for p in range(num_predicates)}
    micro = {(n, k): [0, 0] for n in ('R', 'ngR', 'zR', 'ngzR') for k in ks}
    micro_pred = {(n, k, p): [0, 0] for n in ('mR', 'ngmR') for k in ks for p in range(num_predicates)}
    acc_hit = {k: 0 for k in ks}
    acc_count = 0
    for s in samples:
        n = len(s['gt_rels'])
        if n == 0:
            continue
        if skip_empty and len(s['rel_pairs']) == 0:
            continue
        boxes, labels, gc, ngc = image_lists(s, mode, ng_topk, rank, num_predicates)
        masks = None
        if match == 'mask':
            masks = (s['pred_masks'] if mode in ('sgdet', 'phrdet') else s['gt_masks'], s['gt_masks'])
        acc_count += n
        gt_pairs = {(gs, go) for gs, go, _ in s['gt_rels']}
        acc_list = [t for t in gc if (t[1], t[2]) in gt_pairs]
        for name, lst in (('R', gc), ('ngR', ngc), ('A', acc_list)):
            hit_sets = [hits_of(t, s, boxes, labels, thr, plus_one, phrase, masks) for t in lst]
            for k in ks:
                hit = set().union(*hit_sets[:k]) if hit_sets[:k] else set()
                if name == 'A':
                    acc_hit[k] += len(hit)
                    continue
                rec[(name, k)].append(len(hit) / n)
                micro[(name, k)][0] += len(hit)
                micro[(name, k)][1] += n
                zname = 'zR' if name == 'R' else 'ngzR'
                if zeroshot is not None:
                    zs = [g for g, (gs, go, gp) in enumerate(s['gt_rels'])
                          if (s['gt_labels'][gs], s['gt_labels'][go], gp) in zeroshot]
                    if zs:
                        zrec[(zname, k)].append(len([g for g in zs if g in hit]) / len(zs))
                        micro[(zname, k)][0] += len([g for g in zs if g in hit])
                        micro[(zname, k)][1] += len(zs)
                mname = 'mR' if name == 'R' else 'ngmR'
                for p in range(num_predicates):
                    idx = [g for g, rel in enumerate(s['gt_rels']) if rel[2] == p]
                    if idx:
                        h = len([g for g in idx if g in hit])
                        per_pred[(mname, k, p)].append(h / len(idx))
                        micro_pred[(mname, k, p)][0] += h
                        micro_pred[(mname, k, p)][1] += len(idx)
    out = {}
    for k in ks:
        # a family without any GT relation in the evaluated images has no value (NaN); the whole evaluation 0
        families = [(('R', 'ngR'), rec, 0.0)] + ([(('zR', 'ngzR'), zrec, NAN)] if zeroshot is not None else [])
        for names, per_image, empty in families:
            for name in names:
                if recall_average == 'micro':
                    h, c = micro[(name, k)]
                    out[f'{name}@{k}'] = 100.0 * h / c if c else empty
                else:
                    v = per_image[(name, k)]
                    out[f'{name}@{k}'] = 100.0 * sum(v) / len(v) if v else empty
        if mode in ('predcls', 'sgcls'):
            out[f'A@{k}'] = 100.0 * acc_hit[k] / acc_count if acc_count else 0.0
        for name in ('mR', 'ngmR'):
            values, present = [], []
            for p in range(num_predicates):
                if recall_average == 'micro':
                    h, c = micro_pred[(name, k, p)]
                    values.append(h / c if c else 0.0)
                    present.append(c > 0)
                else:
                    v = per_pred[(name, k, p)]
                    values.append(sum(v) / len(v) if v else 0.0)
                    present.append(bool(v))

            def group_mean(members, empty=NAN):  # no member with GT: no value (the whole set: 0)
                if not any(present[p] for p in members):
                    return empty
                chosen = [p for p in members if present[p]] if mr_average == 'present' else list(members)
                return 100.0 * sum(values[p] for p in chosen) / len(chosen)

            out[f'{name}@{k}'] = group_mean(range(num_predicates), 0.0)
            if name == 'mR':
                for g, members in (groups or {}).items():
                    out[f'mR@{k}_{g}'] = group_mean(members)
        r, m = out[f'R@{k}'], out[f'mR@{k}']
        out[f'F@{k}'] = 2 * r * m / (r + m) if r + m > 0 else 0.0
        out[f'AVG@{k}'] = (r + m) / 2
    return out
