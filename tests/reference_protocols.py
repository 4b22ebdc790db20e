"""Slow loop references of the protocol presets that need a matching rule of their own (not used by the
package). Written from the definitions in docs/protocols.md:

* sgbench: every detection is assigned to the GT object of highest IoU among those with its label (IoU >=
  threshold, the first GT on ties); a predicted triplet hits the GT triplet (assigned subject, assigned
  object, predicate); GT triplets are de-duplicated; predicted triplets that repeat an earlier (subject idx,
  object idx, predicate) are dropped before taking the first K.
"""
from typing import Dict, List, Sequence

from tests.reference_sgg import image_lists, iou


def assign(boxes, labels, gt_boxes, gt_labels, thr: float, plus_one: bool) -> List[int]:
    out = []
    for box, label in zip(boxes, labels):
        best, best_iou = -1, None
        for g, (gbox, glabel) in enumerate(zip(gt_boxes, gt_labels)):
            if glabel != label:
                continue
            v = float(iou(box, gbox, plus_one))
            if best_iou is None or v > best_iou:
                best, best_iou = g, v
        out.append(best if best_iou is not None and best_iou >= thr else -1)
    return out


def _dedup(entries):
    seen, out = set(), []
    for e in entries:
        if e not in seen:
            seen.add(e)
            out.append(e)
    return out


def sgbench_reference(samples: Sequence[dict], num_predicates: int, mode: str = 'sgdet',
                      ks: Sequence[int] = (20, 50, 100), thr: float = 0.5, plus_one: bool = False,
                      ng_topk: int = 100, rank: str = 'score', mr_average: str = 'present') -> Dict[str, float]:
    """R@K, mR@K, PairR@K (K in ``ks`` and 'inf'), InstR, PRank; percentages except PRank."""
    names = [str(k) for k in ks] + ['inf']
    limits = list(ks) + [10 ** 9]
    recall = {n: [] for n in names}
    pair_recall = {n: [] for n in names}
    per_pred = {(n, p): [] for n in names for p in range(num_predicates)}
    inst, prank_cells = [], []
    for s in samples:
        gt = _dedup([tuple(r) for r in s['gt_rels']])
        if not gt:
            continue
        boxes, labels, gc, ngc = image_lists(s, mode, ng_topk, rank, num_predicates)
        a = assign(boxes, labels, s['gt_boxes'], s['gt_labels'], thr, plus_one)
        inst.append(len({g for g in a if g >= 0}) / len(s['gt_boxes']))
        listed = _dedup([(sub, obj, p) for _, sub, obj, p in gc])
        remapped = [(a[sub], a[obj], p) for sub, obj, p in listed]
        gt_pairs = _dedup([(g[0], g[1]) for g in gt])
        for n, k in zip(names, limits):
            top = set(remapped[:k])
            recall[n].append(len([g for g in gt if g in top]) / len(gt))
            top_pairs = {(t[0], t[1]) for t in remapped[:k] if t[0] >= 0 and t[1] >= 0}
            pair_recall[n].append(len([q for q in gt_pairs if q in top_pairs]) / len(gt_pairs))
            for p in range(num_predicates):
                of_p = [g for g in gt if g[2] == p]
                if of_p:
                    per_pred[(n, p)].append(len([g for g in of_p if g in top]) / len(of_p))
        # PRank: walk the no-graph-constraint list
        rank_of, counter = {}, {}
        for sub, obj, p in _dedup([(sub, obj, p) for _, sub, obj, p in ngc]):
            m = (a[sub], a[obj], p)
            if m[0] < 0 or m[1] < 0 or m in rank_of:
                continue
            rank_of[m] = counter.get(m[:2], 0)
            counter[m[:2]] = counter.get(m[:2], 0) + 1
        for p in range(num_predicates):
            found = [rank_of[g] for g in gt if g[2] == p and g in rank_of]
            if found:
                prank_cells.append(sum(found) / len(found))
    out = {}
    for n in names:
        out[f'R@{n}'] = 100.0 * sum(recall[n]) / len(recall[n]) if recall[n] else 0.0
        out[f'PairR@{n}'] = 100.0 * sum(pair_recall[n]) / len(pair_recall[n]) if pair_recall[n] else 0.0
        values = [sum(per_pred[(n, p)]) / len(per_pred[(n, p)]) if per_pred[(n, p)] else None
                  for p in range(num_predicates)]
        chosen = [v for v in values if v is not None] if mr_average == 'present' else \
            [v or 0.0 for v in values]
        out[f'mR@{n}'] = 100.0 * sum(chosen) / len(chosen) if chosen else 0.0
    out['InstR'] = 100.0 * sum(inst) / len(inst) if inst else 0.0
    out['PRank'] = sum(prank_cells) / len(prank_cells) if prank_cells else float('nan')
    return out
