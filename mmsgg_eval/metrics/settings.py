"""A metric's settings: its recorded constructor arguments (:func:`~mmsgg_eval.metrics.options.recorded_arguments`)
sorted by what they decide. Output-only arguments (where files go, how work is pooled), summary-only ones and
rank-local ones are declared here once; the rest are the settings an evaluation state saves as JSON
(:func:`metric_settings`) and, compared exactly (:func:`key_value`), the keys under which metrics share rows and
summaries (:func:`work_key`, used by :meth:`~mmsgg_eval.metrics.base.RowMetric.compute_key` and
:meth:`~mmsgg_eval.metrics.base.RowMetric.summary_key`).
"""
from typing import Any, Dict, Hashable, Optional

from torch import Tensor

from .options import recorded_arguments

#: Constructor arguments that only say where a metric writes (or how it pools work): not part of a state's
#: settings, so two shards writing to different places still merge.
#: A state is untrusted input: these are never taken from one
#: (:meth:`~mmsgg_eval.metrics.state.EvaluationState.build_metric` drops them with a warning), so a state cannot
#: say where files go.
OUTPUT_ARGUMENTS = ('outfile_prefix', 'report_dir', 'save_state', 'per_image_out', 'out_file_path',
                    'collect_device', 'pool_samples')
#: Constructor arguments replaced by a placeholder when a metric is rebuilt from a state (the summary never
#: uses them; recorded by their description): RelCLIPScore's image / text encoder.
SUMMARY_ONLY_ARGUMENTS = ('encoder',)
#: Constructor arguments that may differ between the ranks of one evaluation (where a rank computes), left out
#: of what the ranks compare at the reduce (:func:`~mmsgg_eval.metrics.state.rows_description`).
RANK_LOCAL_ARGUMENTS = ('device',)
#: Constructor arguments that decide nothing a metric computes, for the keys of shared work
#: (:func:`work_key`): :data:`OUTPUT_ARGUMENTS` except ``pool_samples`` (members of a compute group pool
#: identically on every rank), and ``prefix`` (it names the keys only).
NOT_IN_WORK_KEYS = tuple(a for a in OUTPUT_ARGUMENTS if a != 'pool_samples') + ('prefix',)


def metric_settings(metric: Any) -> Dict[str, Any]:
    """The JSON settings of a metric (see :class:`~mmsgg_eval.metrics.state.EvaluationState`): given arguments
    must be plain JSON values (or a :data:`SUMMARY_ONLY_ARGUMENTS` entry, recorded by its description); defaults
    that are not (e.g. the protocol's 'unset' marker) are left out, so the rebuilt metric takes the same default."""
    recorded = recorded_arguments(metric)
    if recorded is None:
        raise TypeError(f'{type(metric).__name__}: no recorded constructor arguments (not a RowMetric?)')
    out: Dict[str, Any] = {}
    for name, (value, given) in recorded.items():
        if name in OUTPUT_ARGUMENTS:
            continue
        if name in SUMMARY_ONLY_ARGUMENTS:
            out[name] = _describe(value)
        elif _is_plain(value):
            out[name] = _plain(value)
        elif given:
            raise TypeError(f'{type(metric).__name__}: argument {name}={value!r} cannot be saved in an evaluation '
                            f'state (only JSON values: numbers, strings, lists, dicts)')
    return out


def _is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def _plain(value: Any) -> Any:
    """Tuples as lists (what JSON keeps), recursively."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _describe(value: Any) -> Any:
    described = getattr(value, 'description', None)
    if described is not None:
        return described
    return _plain(value) if _is_plain(value) else f'{type(value).__module__}.{type(value).__qualname__}'


def key_value(value: Any, identity: bool = True) -> Hashable:
    """A hashable stand-in for a constructor argument, equal for two values exactly when they are equal in
    content and kind: tensors and arrays by dtype, shape and bytes; lists and tuples alike; dicts by sorted
    items; objects with a ``description`` by it; other unhashable objects by identity (never equal to another
    object: no sharing rather than a wrong one); other objects by their type only when ``identity`` is False
    (what the ranks compare: the same on every process). ``True`` and ``1``, ``1`` and ``1.0`` differ."""
    if isinstance(value, Tensor):
        t = value.detach().cpu().contiguous()
        return ('tensor', str(t.dtype), tuple(t.shape), t.numpy().tobytes())
    if type(value).__module__ == 'numpy' and hasattr(value, 'tobytes'):
        return ('array', str(value.dtype), tuple(getattr(value, 'shape', ())), value.tobytes())
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, value)
    if isinstance(value, (list, tuple)):
        if all(type(v) is str for v in value):  # names (classes, predicates): the rule below, at once
            return ('sequence', tuple([('str', v) for v in value]))
        return ('sequence', tuple(key_value(v, identity) for v in value))
    if isinstance(value, (set, frozenset)):
        return ('set', tuple(sorted((key_value(v, identity) for v in value), key=repr)))
    if isinstance(value, dict):
        return ('dict', tuple(sorted(((str(k), key_value(v, identity)) for k, v in value.items()), key=repr)))
    described = getattr(value, 'description', None)
    if described is not None:
        return ('described', key_value(described, identity))
    kind = f'{type(value).__module__}.{type(value).__qualname__}'
    if not identity:
        return ('object', kind)
    try:
        hash(value)
    except TypeError:
        return ('object', id(value))
    return (kind, value)


def work_key(metric: Any, part: str, identity: bool = True, rows: Optional[Hashable] = None) -> Optional[Hashable]:
    """The key of shared work, derived (never hand-listed): ``part='rows'`` is the compute key (what
    :meth:`~mmsgg_eval.metrics.base.RowMetric.compute_rows` depends on), ``part='summary'`` the summary key.

    Rows: the class that computes them (the one defining ``compute_rows``), the row schema, every recorded
    constructor argument (:func:`~mmsgg_eval.metrics.options.recorded_arguments`, by :func:`key_value`) except
    :data:`NOT_IN_WORK_KEYS` and the metric's declared ``summary_arguments``, and its ``row_facts()`` (the
    dataset facts and derived values the rows read: class and predicate names, zero-shot codes by content,
    ...). Summary: the rows' key plus the ``summary_arguments``. So an argument added to a constructor is part
    of both keys unless declared otherwise: forgetting it can cost sharing, never give a wrong shared summary.
    None when the metric's arguments were not recorded (shares nothing). ``identity``: as :func:`key_value`;
    ``rows``: the rows' key when already computed (``part='summary'``)."""
    recorded = recorded_arguments(metric)
    if recorded is None:
        return None
    summary_only = tuple(metric.summary_arguments)
    if part == 'rows':
        owner = next(c for c in type(metric).__mro__ if 'compute_rows' in c.__dict__)
        schema = tuple((t, tuple((c, str(d), tuple(sh)) for c, (d, sh) in cols.items()))
                       for t, cols in metric.row_schema().items())
        arguments = tuple((k, key_value(v, identity)) for k, (v, _) in sorted(recorded.items())
                          if k not in NOT_IN_WORK_KEYS and k not in summary_only)
        return (f'{owner.__module__}.{owner.__qualname__}', schema, arguments,
                tuple((k, key_value(v, identity)) for k, v in metric.row_facts()))
    if part == 'summary':
        rows = work_key(metric, 'rows', identity) if rows is None else rows
        return (rows, tuple((k, key_value(recorded[k][0], identity) if k in recorded else ('not given',))
                            for k in summary_only))
    raise ValueError(f'work_key: part must be rows or summary, got {part!r}')

