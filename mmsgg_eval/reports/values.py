"""Values and labels every report output shares: key names at K, the missing-value mark, number formatting, the
predicate groups of a summary, JSON-safe values."""
from typing import Any, Dict, Optional, Sequence


GROUP_ORDER = ('head', 'body', 'tail')


#: Keys without K shown in the main table when the summary has them (detection AP, sgbench, VLM).
HEADLINE_EXTRA = ('mAP', 'AP@50', 'InstR', 'PRank', 'FailureRate')


MISSING = '–'  # shown for a value that does not exist (NaN, a predicate without GT)


def _k_label(k: Any) -> str:
    return 'all' if _is_all(k) else str(k) if isinstance(k, str) else str(int(k))


def _is_all(k: Any) -> bool:
    return k is None or (isinstance(k, str) and k.lower() == 'all')


def recall_key(family: str, k: Any, suffix: str = '') -> str:
    """Metric key of a recall family at K: ``('R', 50) -> 'R@50'``, ``('R', 'inf') -> 'R@inf'``,
    ``('mR', 'all', '_tail') -> 'mRecall_tail'``."""
    if _is_all(k):
        return {'R': 'Recall', 'mR': 'mRecall'}[family] + suffix
    return f'{family}@{_k_label(k)}{suffix}'


def _per_predicate_key(k: Any) -> str:
    return 'Recall' if _is_all(k) else f'R@{_k_label(k)}'


def json_safe(value: Any, nan_as_null: bool = True) -> Any:
    """Plain JSON values: tensors/arrays to lists, numpy scalars to Python, NaN/inf to None (unless
    ``nan_as_null=False``), other objects to their string."""
    import math

    import numpy as np
    if isinstance(value, dict):
        return {str(k): json_safe(v, nan_as_null) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, nan_as_null) for v in value]
    if hasattr(value, 'detach') and hasattr(value, 'tolist'):
        return json_safe(value.detach().cpu().tolist(), nan_as_null)
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist(), nan_as_null)
    if isinstance(value, np.generic):
        value = value.item()
    if nan_as_null and isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _is_value(value: Any) -> bool:
    """True for a finite number (None, NaN and inf are no value: shown as ``–``)."""
    import math
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(value: Any, digits: int = 2) -> str:
    return f'{float(value):.{digits}f}' if _is_value(value) else MISSING


def _group_of(summary: Dict[str, Any]) -> Dict[str, str]:
    out = {}
    for group, members in (summary.get('groups') or {}).items():
        for name in members:
            out[name] = group
    return out


def _ordered_groups(summary: Dict[str, Any]) -> list:
    groups = list((summary.get('groups') or {}).keys())
    return [g for g in GROUP_ORDER if g in groups] + [g for g in groups if g not in GROUP_ORDER]


def _chart_k(ks: Sequence[Any], chart_k: Any) -> Any:
    if chart_k is not None:
        return chart_k
    if any(_is_all(k) for k in ks):
        return 'all'
    ints = [int(k) for k in ks if not isinstance(k, str)]
    return max(ints) if ints else (ks[-1] if ks else 'all')


def recall_average_of(summary: Dict[str, Any]) -> Optional[str]:
    """'image' or 'micro': how the summary's recalls average over images (its ``recall_average``, else its
    ``conventions['recall']``); None when it does not say."""
    if summary.get('recall_average') in ('image', 'micro'):
        return summary['recall_average']
    text = str((summary.get('conventions') or {}).get('recall', ''))
    if text.startswith('pooled'):
        return 'micro'
    if text.startswith('per image'):
        return 'image'
    return None


def _per_predicate_caption(summary: Dict[str, Any], ks: Sequence[Any]) -> str:
    average = recall_average_of(summary)
    how = {'image': 'image-averaged: for each predicate, the mean over the evaluated images containing it of '
                    'its hits / its GT relations (the recall mR averages)',
           'micro': 'pooled: hits / GT relations of the predicate over all evaluated images'}.get(
        average, 'as the summary defines it')
    return (f'Per-predicate recall (%), {how}; rows in training-frequency order when known; {MISSING} = no GT '
            f'relation of the predicate in the evaluated images')


class Estimate(float):
    """A key's value with its bootstrap interval (``low``, ``high``; ``bootstrap=`` of the metrics): a float
    everywhere (CSV, JSON), printed by the report tables as ``41.36 [39.9, 42.8]`` (one decimal less), followed
    by ``unreliable: REASON`` when the interval is marked unreliable (``note``, ``summary['interval_notes']``)."""

    def __new__(cls, value: float, low: float, high: float, note: str = '') -> 'Estimate':
        out = super().__new__(cls, value)
        out.low, out.high, out.note = low, high, note
        return out


def summary_values(summary: Dict[str, Any]) -> Dict[str, Any]:
    """``summary['metrics']`` with each key that has a bootstrap interval (``summary['intervals']``) as an
    :class:`Estimate` (with its ``summary['interval_notes']`` reason when the interval is unreliable)."""
    intervals, notes = summary.get('intervals') or {}, summary.get('interval_notes') or {}
    return {k: Estimate(v, *intervals[k], note=notes.get(k, '')) if k in intervals and _is_value(v) else v
            for k, v in summary.get('metrics', {}).items()}
