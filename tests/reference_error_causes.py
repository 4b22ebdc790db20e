"""Slow loop reference of the error analysis (where recall is lost), relative recall and PySGG's stage-wise
recall, written from their definitions (docs/metrics.md), on the plain-list samples of ``tests/sgg_samples.py``.

For every GT relation and every K the outcome is the first that applies: hit, subject_loc, object_loc,
subject_cls, object_cls, pair, predicate, rank; no_prediction for the GT relations of images counted without any
predicted pair. Objects are matched by IoU (and class) in every mode, never by index. Not used by the package.
"""
from typing import Dict, List, Optional, Sequence

from tests.reference_sgg import hits_of, image_lists, iou

CAUSES = ('subject_loc', 'object_loc', 'subject_cls', 'object_cls', 'pair', 'predicate', 'rank', 'no_prediction')


def relation_outcomes(s: dict, mode: str, ks: Sequence[int], thr: float, plus_one: bool, ng_topk: int, rank: str,
                      num_predicates: int, counted_without_pairs: bool) -> List[Dict[int, str]]:
    """For each GT relation of the image, ``{K: outcome}``, and the no-graph-constraint first-hit positions."""
    boxes, labels, gc, ngc = image_lists(s, mode, ng_topk, rank, num_predicates)
    gt_boxes, gt_labels = s['gt_boxes'], s['gt_labels']
    gc_hits = [hits_of(t, s, boxes, labels, thr, plus_one, False) for t in gc]
    ngc_hits = [hits_of(t, s, boxes, labels, thr, plus_one, False) for t in ngc]

    def overlaps(n: int, m: int) -> bool:
        return iou(boxes[n], gt_boxes[m], plus_one) >= thr

    def matches(n: int, m: int) -> bool:
        return overlaps(n, m) and labels[n] == gt_labels[m]

    out = []
    for g, (gs, go, gp) in enumerate(s['gt_rels']):
        first = next((j for j, h in enumerate(gc_hits) if g in h), None)
        first_ng = next((j for j, h in enumerate(ngc_hits) if g in h), None)
        # every predicted pair (the whole GC list: one entry per pair with its top predicate)
        joined = [t for t in gc if matches(t[1], gs) and matches(t[2], go)]
        per_k = {}
        for k in ks:
            if first is not None and first < k:
                per_k[k] = 'hit'
            elif len(s['rel_pairs']) == 0 and counted_without_pairs:
                per_k[k] = 'no_prediction'
            elif not any(overlaps(n, gs) for n in range(len(boxes))):
                per_k[k] = 'subject_loc'
            elif not any(overlaps(n, go) for n in range(len(boxes))):
                per_k[k] = 'object_loc'
            elif not any(matches(n, gs) for n in range(len(boxes))):
                per_k[k] = 'subject_cls'
            elif not any(matches(n, go) for n in range(len(boxes))):
                per_k[k] = 'object_cls'
            elif not joined:
                per_k[k] = 'pair'
            elif not any(t[3] == gp for t in joined):
                per_k[k] = 'predicate'
            else:
                per_k[k] = 'rank'
            if per_k[k] == 'predicate' and first_ng is not None and first_ng < min(k, ng_topk):
                per_k[(k, 'ng')] = True
        out.append(per_k)
    return out


def reference_causes(samples: Sequence[dict], num_predicates: int, mode: str, ks: Sequence[int] = (20, 50, 100),
                     thr: float = 0.5, plus_one: bool = False, ng_topk: int = 100, rank: str = 'score',
                     skip_empty: bool = True, recall_average: str = 'image',
                     missing: Optional[Sequence[bool]] = None) -> Dict[str, float]:
    """``{'miss@K_cause': percent, 'miss@K_predicate_ng': percent, 'hit@K': percent}`` averaged as R@K (per image
    or micro), and ``'R@rel'`` / ``'mR@rel'`` (mR over all predicates). ``missing``: images whose prediction is
    missing (counted, all misses ``no_prediction``)."""
    per_image = {}  # (name, k) -> list of fractions
    micro = {}  # (name, k) -> [count, total]
    rel_image, rel_micro, rel_pred = [], [0, 0], {p: [] for p in range(num_predicates)}
    rel_pred_micro = {p: [0, 0] for p in range(num_predicates)}
    names = ('hit',) + CAUSES + ('predicate_ng',)
    for i, s in enumerate(samples):
        n = len(s['gt_rels'])
        is_missing = bool(missing[i]) if missing is not None else False
        if n == 0 or (skip_empty and len(s['rel_pairs']) == 0 and not is_missing):
            continue
        if is_missing:
            s = dict(s, rel_pairs=[], rel_scores=[], pred_boxes=s['gt_boxes'], pred_labels=s['gt_labels'],
                     pred_scores=[1.0] * len(s['gt_labels']))
        outcomes = relation_outcomes(s, mode, ks, thr, plus_one, ng_topk, rank, num_predicates, True)
        for k in ks:
            for name in names:
                if name == 'predicate_ng':
                    c = sum(1 for o in outcomes if o.get((k, 'ng')))
                else:
                    c = sum(1 for o in outcomes if o[k] == name)
                per_image.setdefault((name, k), []).append(c / n)
                acc = micro.setdefault((name, k), [0, 0])
                acc[0] += c
                acc[1] += n
        # relative recall: hit within the first n graph-constrained entries
        _, _, gc, _ = image_lists(s, mode, ng_topk, rank, num_predicates)
        boxes, labels, _, _ = image_lists(s, mode, ng_topk, rank, num_predicates)
        hit = set()
        for t in gc[:n]:
            hit |= hits_of(t, s, boxes, labels, thr, plus_one, False)
        rel_image.append(len(hit) / n)
        rel_micro[0] += len(hit)
        rel_micro[1] += n
        for p in range(num_predicates):
            idx = [g for g, r in enumerate(s['gt_rels']) if r[2] == p]
            if idx:
                rel_pred[p].append(len([g for g in idx if g in hit]) / len(idx))
                rel_pred_micro[p][0] += len([g for g in idx if g in hit])
                rel_pred_micro[p][1] += len(idx)
    out = {}
    for (name, k), values in per_image.items():
        key = f'hit@{k}' if name == 'hit' else f'miss@{k}_{name}'
        if recall_average == 'micro':
            c, t = micro[(name, k)]
            out[key] = 100.0 * c / t if t else 0.0
        else:
            out[key] = 100.0 * sum(values) / len(values)
    if recall_average == 'micro':
        out['R@rel'] = 100.0 * rel_micro[0] / rel_micro[1] if rel_micro[1] else 0.0
        per_p = [c / t if t else 0.0 for c, t in rel_pred_micro.values()]
    else:
        out['R@rel'] = 100.0 * sum(rel_image) / len(rel_image) if rel_image else 0.0
        per_p = [sum(v) / len(v) if v else 0.0 for v in rel_pred.values()]
    out['mR@rel'] = 100.0 * sum(per_p) / num_predicates
    return out


def reference_stagewise(samples: Sequence[dict], num_predicates: int, mode: str, ks: Sequence[int],
                        thr: float, plus_one: bool, rank: str = 'score') -> Dict[str, float]:
    """PySGG's stage-wise recall written from its definition: for each counted image (GT relations and predicted
    pairs), over the first K graph-constrained entries (pair, its top predicate): pair_loc (both ends overlap
    their GT boxes, classes and predicate ignored), pair_det (and both classes), pred_cls (overlap and the
    predicate), each as found GT relations / (n + 1e-5); instance loc / det: GT objects overlapped by a
    predicted object without / with its class, / (objects + 1e-6); means over the images."""
    sums: Dict[str, List[float]] = {}
    for s in samples:
        n = len(s['gt_rels'])
        if n == 0 or len(s['rel_pairs']) == 0:
            continue
        boxes, labels, gc, _ = image_lists(s, mode, 100, rank, num_predicates)
        gt_boxes, gt_labels = s['gt_boxes'], s['gt_labels']

        def loc(a: int, m: int) -> bool:
            return iou(boxes[a], gt_boxes[m], plus_one) >= thr

        def det(a: int, m: int) -> bool:
            return loc(a, m) and labels[a] == gt_labels[m]
        for k in ks:
            found = {'pair_loc': set(), 'pair_det': set(), 'pred_cls': set()}
            for _, a, b, p in gc[:k]:
                for g, (gs, go, gp) in enumerate(s['gt_rels']):
                    if loc(a, gs) and loc(b, go):
                        found['pair_loc'].add(g)
                        if p == gp:
                            found['pred_cls'].add(g)
                    if det(a, gs) and det(b, go):
                        found['pair_det'].add(g)
            for name, hit in found.items():
                sums.setdefault(f'stage_{name}@{k}', []).append(len(hit) / (n + 1e-5))
        m = len(gt_boxes)
        sums.setdefault('stage_inst_loc', []).append(
            len([j for j in range(m) if any(loc(a, j) for a in range(len(boxes)))]) / (m + 1e-6))
        sums.setdefault('stage_inst_det', []).append(
            len([j for j in range(m) if any(det(a, j) for a in range(len(boxes)))]) / (m + 1e-6))
    return {key: 100.0 * sum(v) / len(v) for key, v in sums.items()}
