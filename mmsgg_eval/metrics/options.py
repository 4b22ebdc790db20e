"""Checks of the metrics' constructor arguments, written once: every option a user can write is read as what it
means or refused with a ``ValueError`` naming the metric and the option (never a bare ``TypeError`` from deep
inside, never a silently different number).

* :func:`positive_ints`: a K or a sequence of Ks (``topk=50`` and ``topk=(20, 50)`` alike), integers >= 1, no
  repeats; booleans and fractional numbers are refused;
* :func:`positive_int`: one such integer (``ng_topk``, ``pool_samples``, ``max_dets``, ``batch_size``);
* :func:`iou_threshold`: an IoU threshold in (0, 1] (``iou_thr``; 0 would match every box pair);
* :func:`number_sequence`: one number or a sequence of them (``thresholds=0.5`` and ``(0.5, 0.7)``);
* :func:`bootstrap_options`: ``bootstrap=`` (None / True / a number of samples / a dict of settings).

The keywords every row metric's constructor takes without declaring them are one table, :data:`BASE_OPTIONS`
(name -> check), and one wrapper, :func:`with_base_options`, applied to every
:class:`~mmsgg_eval.metrics.base.RowMetric` subclass's ``__init__``: it records the constructor arguments
(:func:`recorded_arguments`, what an evaluation state saves) and stores the checked options.
"""
import functools
import inspect
import numbers
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple


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


#: ``bootstrap=True``: percentile intervals from 1000 image resamples, 95 % level, seed 0.
BOOTSTRAP_DEFAULTS = {'samples': 1000, 'level': 0.95, 'seed': 0}


def bootstrap_options(value: Any, owner: str) -> Optional[Dict[str, Any]]:
    """``bootstrap=`` of a metric: None / False (off), True (defaults), an int (``samples``) or a dict with
    ``samples`` (>= 1), ``level`` (in (0, 1)) and ``seed`` (int); anything else is a ``ValueError`` naming it."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    elif isinstance(value, int):
        value = {'samples': value}
    if not isinstance(value, Mapping):
        raise ValueError(f'{owner}: bootstrap must be None, True, a number of samples or a dict('
                         f'samples=..., level=..., seed=...), got {value!r}')
    unknown = sorted(set(value) - set(BOOTSTRAP_DEFAULTS))
    if unknown:
        raise ValueError(f'{owner}: unknown bootstrap option(s) {unknown}; expected {sorted(BOOTSTRAP_DEFAULTS)}')
    out = {**BOOTSTRAP_DEFAULTS, **value}
    out['samples'] = positive_int(out['samples'], 'bootstrap samples', owner)
    level = out['level']
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < float(level) < 1:
        raise ValueError(f'{owner}: bootstrap level must be in (0, 1), got {level!r}')
    out['level'] = float(level)
    if isinstance(out['seed'], bool) or not isinstance(out['seed'], int):
        raise ValueError(f'{owner}: bootstrap seed must be an integer, got {out["seed"]!r}')
    return out


def state_path(value: Any, owner: str) -> Any:
    """``save_state=``: the path of the evaluation state written at ``evaluate()`` (main rank), kept as given
    (read with ``str()`` when the state is written)."""
    return value


#: The keywords every row metric's constructor takes without declaring them: name -> ``check(value, owner)``,
#: whose result is stored in the metric's attribute of that name once the constructor's body has run. None
#: (the default of both) is never stored: the class attribute (None, off) stands. No evaluation state records
#: them (they say where files go, or add intervals to a summary).
BASE_OPTIONS: Dict[str, Callable[[Any, str], Any]] = {
    'save_state': state_path,
    'bootstrap': bootstrap_options,
}
_RECORDED = '_init_arguments'


def with_base_options(init: Callable) -> Callable:
    """Wrap a row metric's ``__init__``: the :data:`BASE_OPTIONS` keywords are taken out of the call (the body
    never sees them), the outermost call (not a subclass's ``super().__init__``) records the other arguments
    (:func:`recorded_arguments`), the body runs, then each option given a value other than None is checked and
    stored (a nested call's value is overridden by an outer one's)."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        given = {name: kwargs.pop(name) for name in BASE_OPTIONS if name in kwargs}
        if _RECORDED not in self.__dict__:
            self.__dict__[_RECORDED] = _bound_arguments(signature, self, args, kwargs)
        init(self, *args, **kwargs)
        for name, value in given.items():
            if value is not None:
                setattr(self, name, BASE_OPTIONS[name](value, type(self).__name__))
    return wrapper


def _bound_arguments(signature: inspect.Signature, self: Any, args: tuple, kwargs: dict) -> Dict[str, Any]:
    """``{name: (value, given)}`` of a constructor call (``given``: passed by the caller, else a default)."""
    bound = signature.bind(self, *args, **kwargs)
    given = set(bound.arguments)
    bound.apply_defaults()
    out: Dict[str, Any] = {}
    for name, value in list(bound.arguments.items())[1:]:
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update({k: (v, True) for k, v in value.items()})
        elif kind is not inspect.Parameter.VAR_POSITIONAL:
            out[name] = (value, name in given)
    return out


def recorded_arguments(metric: Any) -> Optional[Dict[str, Tuple[Any, bool]]]:
    """``{name: (value, given)}`` of the constructor call that built ``metric`` (defaults applied; the
    :data:`BASE_OPTIONS` keywords left out); None for an object not built by a wrapped constructor."""
    return metric.__dict__.get(_RECORDED)
