"""JSONL predictions: one JSON object per line, the ground truth taken from the dataset of the config.

Format (UTF-8 text; blank lines are ignored)::

    {"sample_idx": 0,
     "pred_instances": {"bboxes": [[x1, y1, x2, y2], ...], "labels": [...], "scores": [...]},
     "pred_relations": {"pair_idxs": [[s, o], ...], "scores": [[p0, p1, ...], ...]}}

* Identity: ``sample_idx``, a non-negative JSON integer (the dataset index; floats, strings and null are
  errors), or, without it, ``img_id`` (a string or integer matched against the dataset's ``img_id``). A line
  with both must name the dataset's image at that index (an error naming both otherwise); the samples keep
  the dataset's ``img_id``.
* ``pred_instances``: ``bboxes`` [N, 4] xyxy in original image pixels, ``labels`` [N] 0-based object classes,
  ``scores`` [N]; each optional (PredCls needs none, SGCls labels and scores, SGDet all three).
* ``pred_relations`` (required by the scene-graph metrics): ``pair_idxs`` [R, 2] 0-based (subject, object) indices into the objects;
  ``scores`` [R, P+1] (column 0 = no relation) or [R, P] per-predicate scores, or ``scores`` [R] together
  with ``labels`` [R] (0-based predicates) for single-label predictors.
* Arrays are rectangular lists of numbers (no null, NaN or booleans); integer fields hold integers (``2.0``
  is accepted as 2, ``0.9`` is not). Other top-level keys are kept as metainfo.

Every predicted sample appears on one line; a sample on no line is an error for the offline CLI unless
``--allow-missing`` (see :mod:`mmsgg_eval.io.samples`). Errors name the file and line, the sample, the field
and what was expected.
"""
import json
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from .errors import InputFileError, describe, value_repr

#: Fields of the prediction groups: (integer?, trailing shape: () = [n], (k,) = [n, k], None = [n] or [n, k]).
GROUP_FIELDS = {
    'pred_instances': {'bboxes': (False, (4,)), 'labels': (True, ()), 'scores': (False, ())},
    'pred_relations': {'pair_idxs': (True, (2,)), 'scores': (False, None), 'labels': (True, ())},
}
#: Fields whose first dimensions must agree within a group.
COUNTED = {'pred_instances': ('bboxes', 'labels', 'scores'), 'pred_relations': ('pair_idxs', 'scores', 'labels')}


def iter_json_lines(path: str, undecodable: str = 'error') -> Iterator[Tuple[int, Dict[str, Any]]]:
    """``(line number, object)`` of each non-blank line of a JSONL file.

    ``undecodable``: a line that is not UTF-8 is an error naming the line and byte (``'error'``), or is
    decoded with ``surrogateescape`` (``'escape'``: the caller decides what such a value means).
    """
    for lineno, record, _ in iter_json_text_lines(path, undecodable):
        yield lineno, record


def iter_json_text_lines(path: str, undecodable: str = 'error') -> Iterator[Tuple[int, Dict[str, Any], str]]:
    """:func:`iter_json_lines` with the decoded text of each line as a third element."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f'predictions file not found: {os.path.abspath(path)}')
    with open(path, 'rb') as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode('utf-8')
            except UnicodeDecodeError as err:
                if undecodable != 'escape':
                    raise InputFileError(describe(path, lineno), f'is not UTF-8 text (byte 0x{raw[err.start]:02x} '
                                                                 f'at column {err.start + 1}); expected one JSON '
                                                                 f'object per line') from None
                line = raw.decode('utf-8', 'surrogateescape')
            if lineno == 1:
                line = line.lstrip('\ufeff')
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputFileError(describe(path, lineno), f'is not valid JSON ({err.msg} at column {err.colno}); '
                                                             f'expected one JSON object per line') from None
            if not isinstance(record, dict):
                raise InputFileError(describe(path, lineno), f'must be a JSON object, got a JSON '
                                                             f'{type(record).__name__}')
            yield lineno, record, line


def _first_non_number(value: Any, at: Tuple[int, ...] = ()) -> Optional[Tuple[Tuple[int, ...], Any]]:
    """Index and value of the first entry of nested lists that is not a number (None when all are)."""
    if isinstance(value, list):
        for i, v in enumerate(value):
            bad = _first_non_number(v, at + (i,))
            if bad is not None:
                return bad
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return at, value
    return None


def _ragged_rows(value: List[Any]) -> str:
    lengths = [len(v) if isinstance(v, list) else None for v in value]
    first = lengths[0]
    k = next((i for i, n in enumerate(lengths) if n != first), None)
    if k is None:
        return 'nested lists of different lengths'
    show = lambda n: 'a number' if n is None else f'{n} entries'  # noqa: E731
    return f'row 0 has {show(first)}, row {k} has {show(lengths[k])}'


def as_array(value: Any, where: str, sample: Optional[str], field: str, integer: bool,
             tail: Optional[Tuple[int, ...]], may_hold_booleans: bool = True) -> np.ndarray:
    """A JSON list as a numpy array (int64 / float64) of shape [n] + ``tail`` (``tail=None``: [n] or [n, k]);
    anything else raises :class:`InputFileError` saying what was expected.

    ``may_hold_booleans=False`` (the line has no ``true`` / ``false``) skips the element-wise scan for
    booleans, which numpy would otherwise turn into 0 / 1 silently; other non-numbers are found by numpy.
    """
    kind = 'integers' if integer else 'numbers'
    shape = '[n]' if tail == () else f'[n, {tail[0]}]' if tail else '[n] or [n, k]'
    if not isinstance(value, list):
        raise InputFileError(where, f'must be a list of {kind} {shape}, got {value_repr(value)}', sample, field)
    try:
        arr = None if may_hold_booleans else np.asarray(value)
    except ValueError:  # ragged
        arr = None
    if arr is None or arr.dtype.kind not in 'iuf':  # find the first offending entry for the message
        bad = _first_non_number(value)
        if bad is not None:
            index = ''.join(f'[{i}]' for i in bad[0])
            raise InputFileError(where, f'{index} = {value_repr(bad[1])}: expected {kind} {shape}', sample, field)
        try:
            arr = np.asarray(value)
        except ValueError:
            arr = None
        if arr is None or arr.dtype == object:
            raise InputFileError(where, f'is not a rectangular array ({_ragged_rows(value)}); expected {shape}',
                                 sample, field)
    if arr.size == 0:
        return np.zeros((0,) + (tail or ()), np.int64 if integer else np.float64)
    if not np.isfinite(arr).all():
        raise InputFileError(where, f'contains NaN or infinity; expected finite {kind}', sample, field)
    if integer and arr.dtype.kind == 'f':
        if not np.array_equal(arr, np.round(arr)):
            raise InputFileError(where, f'holds non-integer values (e.g. {arr[arr != np.round(arr)][0]!r}); '
                                        f'expected integers', sample, field)
    arr = arr.astype(np.int64 if integer else np.float64)
    ok_dims = (arr.ndim in (1, 2)) if tail is None else (arr.ndim == 1 + len(tail) and arr.shape[1:] == tail)
    if not ok_dims:
        raise InputFileError(where, f'has shape {list(arr.shape)}, expected {shape}', sample, field)
    return arr


def read_prediction(record: Dict[str, Any], where: str, may_hold_booleans: bool = True) -> Dict[str, Any]:
    """One JSONL object -> data-sample fields (numpy arrays; identity unchecked, see the module docstring).
    ``may_hold_booleans``: see :func:`as_array`."""
    ident = record.get('sample_idx', record.get('img_id'))
    if 'sample_idx' not in record and 'img_id' not in record:
        raise InputFileError(where, 'has no `sample_idx` (dataset index) or `img_id`; expected one of them')
    sample = f'sample_idx={value_repr(ident)}' if 'sample_idx' in record else f'img_id={value_repr(ident)}'
    out = {k: v for k, v in record.items() if k not in GROUP_FIELDS}
    for group, fields in GROUP_FIELDS.items():
        if group not in record:
            continue
        value = record[group]
        if not isinstance(value, dict):
            raise InputFileError(where, f'must be an object of named arrays ({", ".join(fields)}), got a JSON '
                                        f'{"array" if isinstance(value, list) else type(value).__name__}',
                                 sample, group)
        arrays = {}
        for key, item in value.items():
            integer, tail = fields.get(key, (False, None))
            arrays[key] = as_array(item, where, sample, f'{group}.{key}', integer, tail, may_hold_booleans)
        counts = [(key, arrays[key].shape[0]) for key in COUNTED[group] if key in arrays]
        if len({n for _, n in counts}) > 1:
            listed = ', '.join(f'`{group}.{k}` {n}' for k, n in counts)
            raise InputFileError(where, f'lengths differ ({listed}); expected one entry per '
                                        f'{"object" if group == "pred_instances" else "pair"}', sample, group)
        out[group] = arrays
    rel = out.get('pred_relations')
    if rel is None:
        return out  # the metric names the sample and the missing field
    for key in ('pair_idxs', 'scores'):
        if key not in rel:
            raise InputFileError(where, 'is missing; expected it in `pred_relations`', sample,
                                 f'pred_relations.{key}')
    if rel['scores'].ndim == 1 and 'labels' not in rel and rel['scores'].shape[0]:
        raise InputFileError(where, 'is 1-D: give `pred_relations.labels` with single-label scores, or scores '
                                    '[R, P+1] / [R, P]', sample, 'pred_relations.scores')
    return out


def iter_jsonl(path: str) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """``(location, prediction fields)`` of each line of a JSONL predictions file (module docstring)."""
    for lineno, record, line in iter_json_text_lines(path):
        where = describe(path, lineno)
        yield where, read_prediction(record, where, may_hold_booleans='true' in line or 'false' in line)
