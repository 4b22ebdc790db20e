"""Checks of the metrics' constructor arguments, written once: every option a user can write is read as what it
means or refused with a ``ValueError`` naming the metric and the option (never a bare ``TypeError`` from deep
inside, never a silently different number).

* :func:`positive_ints`: a K or a sequence of Ks (``topk=50`` and ``topk=(20, 50)`` alike), integers >= 1, no
  repeats; booleans and fractional numbers are refused;
* :func:`positive_int`: one such integer (``ng_topk``, ``pool_samples``, ``max_dets``, ``batch_size``);
* :func:`iou_threshold`: an IoU threshold in (0, 1] (``iou_thr``; 0 would match every box pair);
* :func:`number_sequence`: one number or a sequence of them (``thresholds=0.5`` and ``(0.5, 0.7)``).
"""
import numbers
from typing import Any, Sequence, Tuple


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Integral):
        return True
    return isinstance(value, numbers.Real) and float(value).is_integer() and abs(float(value)) < 2 ** 62


def _describe(value: Any) -> str:
    return f'{value!r} ({type(value).__name__})'


def positive_int(value: Any, name: str, owner: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``; ValueError naming ``owner`` and ``name`` otherwise."""
    if not _is_integer(value) or int(value) < minimum:
        raise ValueError(f'{owner}: {name} must be an integer >= {minimum}, got {_describe(value)}')
    return int(value)


def number_sequence(value: Any, name: str, owner: str) -> Tuple[Any, ...]:
    """One number, or a non-empty sequence of numbers, as a tuple (the values unchanged)."""
    items = (value,) if isinstance(value, (numbers.Real, str)) else value
    try:
        items = tuple(items)
    except TypeError:
        raise ValueError(f'{owner}: {name} must be a number or a sequence of numbers, got {_describe(value)}') \
            from None
    if not items:
        raise ValueError(f'{owner}: {name} must not be empty')
    return items


def positive_ints(value: Any, name: str, owner: str) -> Tuple[int, ...]:
    """A K or a sequence of Ks as a tuple of distinct ints >= 1 (in the given order)."""
    items = number_sequence(value, name, owner)
    bad = [v for v in items if not _is_integer(v) or int(v) < 1]
    if bad:
        raise ValueError(f'{owner}: {name} must be positive integers (one K or a sequence of them), got '
                         f'{_describe(bad[0])} in {value!r}')
    out = tuple(int(v) for v in items)
    if len(set(out)) != len(out):
        raise ValueError(f'{owner}: {name} repeats a value: {value!r}')
    return out


def iou_threshold(value: Any, name: str, owner: str) -> float:
    """An IoU threshold in (0, 1] as a float (compared with ``>=``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) <= 1:
        raise ValueError(f'{owner}: {name} must be a number in (0, 1] (an IoU threshold, compared with >=), got '
                         f'{_describe(value)}')
    return float(value)


def one_of(value: Any, name: str, owner: str, allowed: Sequence[Any]) -> Any:
    """``value`` when it is one of ``allowed``; ValueError listing them otherwise."""
    if value not in allowed:
        raise ValueError(f'{owner}: {name} must be one of {tuple(allowed)}, got {value!r}')
    return value
