"""Slow loop reference of the grounding metric, written from SPEC section 3 in exact rational arithmetic.

Input: a list of samples ``{'gt': [x1, y1, x2, y2], 'pred': [[x1, y1, x2, y2], ...], 'scores': [...] or
None}`` (original pixels, xyxy). The scored box is the highest-scoring one (first on ties / no scores);
no box = IoU 0 with intersection 0 and union = GT area. Continuous IoU; union 0 -> IoU 0.
"""
from fractions import Fraction
from typing import Any, Dict, List, Optional, Sequence


def _frac(v: Any) -> Fraction:
    return Fraction(float(v)) if not isinstance(v, (int, Fraction)) else Fraction(v)


def select_box(pred: Sequence[Sequence[float]], scores: Optional[Sequence[float]]) -> Optional[List[float]]:
    if not pred:
        return None
    best = 0
    if scores is not None:
        for j in range(1, len(pred)):
            if scores[j] > scores[best]:
                best = j
    return list(pred[best])


def exact_iou_terms(pred: Optional[Sequence[float]], gt: Sequence[float]):
    g = [_frac(v) for v in gt]
    area_g = max(g[2] - g[0], 0) * max(g[3] - g[1], 0)
    if pred is None:
        return Fraction(0), area_g
    p = [_frac(v) for v in pred]
    iw = max(min(p[2], g[2]) - max(p[0], g[0]), 0)
    ih = max(min(p[3], g[3]) - max(p[1], g[1]), 0)
    inter = iw * ih
    area_p = max(p[2] - p[0], 0) * max(p[3] - p[1], 0)
    return inter, area_p + area_g - inter


def reference_grounding(samples: List[Dict[str, Any]], thresholds: Sequence[str] = ('0.5', '0.6', '0.7', '0.8',
                                                                                   '0.9'),
                        strict: bool = False) -> Dict[str, Any]:
    """Keys ``Pr@τ`` (percent), ``meanIoU``, ``cumIoU`` as floats rounded once from exact values."""
    taus = [Fraction(t) for t in thresholds]
    ious, inters, unions = [], [], []
    for s in samples:
        box = select_box(s.get('pred') or [], s.get('scores'))
        inter, union = exact_iou_terms(box, s['gt'])
        ious.append(inter / union if union > 0 else Fraction(0))
        inters.append(inter)
        unions.append(union)
    m = len(samples)
    out: Dict[str, Any] = {}
    for t, name in zip(taus, thresholds):
        hits = sum(1 for iou in ious if (iou > t if strict else iou >= t))
        out[f'Pr@{float(Fraction(name))!r}'] = float(Fraction(100 * hits, m))
        out[f'hits@{float(Fraction(name))!r}'] = hits
    out['meanIoU'] = float(sum(ious) / m)
    out['cumIoU'] = float(sum(inters) / sum(unions)) if sum(unions) > 0 else 0.0
    return out
