"""Evaluation states: the reduced row tables of a metric saved to disk, merged across shards, summarised again.

A state (``*.state``) is what :meth:`~mmsgg_eval.metrics.base.RowMetric.summarize` needs and nothing of the
predictions: the metric's reduced, de-duplicated row tables (``sample_idx`` plus the columns of
:meth:`~mmsgg_eval.metrics.base.RowMetric.row_schema`, rows in canonical order: sorted by ``sample_idx``, in
their order of computation within a sample) and what they depend on:

* ``metric_type`` and ``settings``: the constructor arguments (with the defaults of the constructor that was
  called), minus the arguments that only say where files go
  (:data:`~mmsgg_eval.metrics.settings.OUTPUT_ARGUMENTS`); the metric is rebuilt from them
  (:meth:`EvaluationState.build_metric`);
* ``prefix``, ``protocol`` and ``conventions`` (as in ``metrics.json``'s provenance);
* ``dataset``: name, number of samples of the evaluated dataset, and ``gt_hash``, a SHA-256 of the GT of the
  whole dataset (:func:`~mmsgg_eval.metrics.state_paths.dataset_gt_hash`; set by ``tools/test.py`` and the offline CLI, None when the metric
  ran without them), plus the ``dataset_meta`` the summary reads (class and predicate names, counts, ...);
* ``version``: the mmsgg_eval version that wrote it.

Format: a safetensors file (tensors ``rows/{table}/{column}`` and ``meta/{key}``, the JSON header in the
metadata entry ``mmsgg_eval_state``) when ``safetensors`` is installed, else ``torch.save`` of a dict of plain
tensors and the JSON header as a string, loaded with ``weights_only=True``. Nothing is unpickled either way.

Merging (:func:`merge_states`): states of DISJOINT shards of one dataset with equal settings concatenate their
rows and sort them stably by ``sample_idx``; since the rows of a sample never depend on the other samples,
the result is bit for bit the tables of one run over all of them (any world size). A sample in two states,
or states differing in metric, settings, protocol, conventions, dataset or GT are refused with a
:class:`StateMismatchError` naming the difference. Samples of the dataset in no state:
:func:`missing_samples` (the offline CLI refuses them as it refuses missing predictions).
"""
import json
import os
import os.path as osp
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .accumulator import Tables
from .settings import OUTPUT_ARGUMENTS, RANK_LOCAL_ARGUMENTS, SUMMARY_ONLY_ARGUMENTS, metric_settings, work_key

#: Format tag written into every state header.
STATE_FORMAT = 'mmsgg_eval.state/1'
#: File name suffix of a state.
STATE_SUFFIX = '.state'
_HEADER_KEY = 'mmsgg_eval_state'


class StateMismatchError(ValueError):
    """States that cannot be merged or compared (the message names the files and the difference)."""


@dataclass
class EvaluationState:
    """The reduced rows of one metric and what they depend on (see the module docstring).

    Attributes:
        metric_type: class name of the metric (registered in ``mmsgg_eval.registry.METRICS``).
        prefix: the metric's key prefix (``sgdet``, ``vlm``, ``grounding``, ...).
        settings: JSON constructor arguments (:func:`~mmsgg_eval.metrics.settings.metric_settings`).
        protocol: protocol name (None for metrics without one).
        conventions: the conventions of the run, as in ``metrics.json``.
        dataset: ``{'name', 'num_samples', 'gt_hash'}``.
        dataset_meta: the ``dataset_meta`` the metric was given (arrays restored as they were saved).
        version: mmsgg_eval version that computed the rows.
        schema: ``{table: {column: [dtype name, trailing shape]}}`` of the rows.
        tables: ``{table: {'sample_idx': [n] int64, column: [n, ...]}}``, canonical order, on the CPU.
        sources: the files this state was read from (several after a merge; empty before saving).
        position: the metric's place in its evaluator (``--save-state``; None when unknown): states are
            summarised again in that order, so report files get the same names.
    """

    metric_type: str
    prefix: str
    settings: Dict[str, Any]
    protocol: Optional[str]
    conventions: Any
    dataset: Dict[str, Any]
    dataset_meta: Dict[str, Any]
    version: str
    schema: Dict[str, Dict[str, List[Any]]]
    tables: Tables
    sources: List[str] = field(default_factory=list)
    position: Optional[int] = None

    @property
    def name(self) -> str:
        """``{metric_type} ({prefix})``, as messages name it."""
        return f'{self.metric_type} ({self.prefix})'

    @property
    def where(self) -> str:
        """The files of this state, for messages (``'(not saved)'`` when none)."""
        return ' + '.join(self.sources) if self.sources else '(not saved)'

    def sample_ids(self) -> Tensor:
        """[N] int64: the sorted distinct ``sample_idx`` covered (of the first table)."""
        first = next(iter(self.tables.values()), None)
        return torch.unique(first['sample_idx']) if first is not None else torch.zeros(0, dtype=torch.long)

    def identity(self) -> Tuple[str, str]:
        """``(metric_type, prefix)``: states with equal identities are shards of one metric."""
        return self.metric_type, self.prefix

    def build_metric(self, **overrides: Any) -> Any:
        """A fresh metric of :attr:`metric_type` built from :attr:`settings` (+ ``overrides``, e.g.
        ``report_dir``), with :attr:`dataset_meta` set; it has seen no samples."""
        from ..registry import METRICS, resolve_registered
        import mmsgg_eval  # noqa: F401  (registers the metrics)
        dropped = sorted(k for k in self.settings if k in OUTPUT_ARGUMENTS)
        if dropped:  # a state never says where files go (states are untrusted input)
            from ..user_messages import warn_user
            warn_user(f'{self.name}: {self.where} carries the output argument(s) {", ".join(dropped)} in its '
                      f'settings; they are ignored (where files go is given by the command, never by a state)')
        for value in (self.settings.get('prefix'), self.prefix):  # a key prefix names files: a plain name only
            if value is not None and (not isinstance(value, str) or value in ('', '.', '..') or any(
                    sep in value for sep in ('/', '\\', '\0'))):
                from ..io.errors import InputFileError
                raise InputFileError(self.where, f'the state\'s prefix {value!r} is not a plain name (it names '
                                                 f'files; refused)')
        cfg = {k: v for k, v in self.settings.items() if k not in OUTPUT_ARGUMENTS}
        cfg['type'] = self.metric_type
        for name in SUMMARY_ONLY_ARGUMENTS:
            if name in cfg:
                cfg[name] = SummaryOnlyEncoder(cfg[name])
        cfg.update(overrides)
        metric = METRICS.build(resolve_registered(METRICS, cfg))
        metric.dataset_meta = self.dataset_meta
        self.check_rows_for(metric)
        return metric

    def check_rows_for(self, metric: Any) -> None:
        """Raise ``InputFileError`` naming the file, the version that wrote it and the columns, when the state's
        rows lack a column ``metric`` summarises (a state of an older version, before that column existed) or
        hold it with another dtype / shape. Columns the metric does not read are allowed."""
        problems = []
        for table, cols in metric.row_schema().items():
            have = self.schema.get(table)
            if have is None:
                problems.append(f'no table {table!r}')
                continue
            for col, (dtype, shape) in cols.items():
                want = [_dtype_name(dtype), list(shape)]
                if col not in have or col not in self.tables.get(table, {}):
                    problems.append(f'no column {table}.{col}')
                elif list(have[col]) != want:
                    problems.append(f'{table}.{col} is {have[col][0]}{list(have[col][1])}, needed {want[0]}{want[1]}')
        if problems:
            from ..io.errors import InputFileError
            from ..version import __version__
            raise InputFileError(self.where, f'{self.name}: the state (written by mmsgg_eval {self.version}) has not '
                                             f'the rows this version ({__version__}) summarises: '
                                             f'{"; ".join(problems)}; evaluate the predictions again to write a '
                                             f'new state')


class SummaryOnlyEncoder:
    """Stands for an image / text encoder in a metric rebuilt from a state: summarising needs none, any use
    is an error naming the recorded encoder."""

    def __init__(self, description: Any) -> None:
        self.description = description

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f'this metric was rebuilt from an evaluation state: its encoder '
                           f'({self.description}) is not loaded; states are summarised, not evaluated again')

    encode_image = encode_text = _refuse


# ---------------------------------------------------------------------------------------------- from a metric


def rows_description(metric: Any) -> Dict[str, Any]:
    """What a metric's rows depend on, by component, JSON-ready: what two ranks reducing their rows together
    must agree on (:class:`~mmsgg_eval.metrics.accumulator.RankFingerprint`), in the terms of a state: metric
    type and prefix, settings (:func:`metric_settings`; the compute key where a setting is not JSON), protocol
    and conventions, ``dataset_meta`` and the row schema."""
    try:
        settings: Any = {k: v for k, v in metric_settings(metric).items() if k not in RANK_LOCAL_ARGUMENTS}
    except TypeError:  # a setting that is not JSON (a tensor of zero-shot triplets): the derived key's part
        settings = repr(work_key(metric, 'rows', identity=False))
    protocol = getattr(metric, 'protocol', None)
    return {'metric': f'{type(metric).__name__} ({metric.prefix})', 'settings': settings,
            'protocol': getattr(protocol, 'name', protocol), 'conventions': _json(getattr(metric, 'conventions', None)),
            'dataset_meta': _json(dict(metric.dataset_meta or {})),
            'row tables': {t: {c: [_dtype_name(d), list(sh)] for c, (d, sh) in cols.items()}
                           for t, cols in metric.row_schema().items()}}


def state_of(metric: Any, tables: Tables, size: Optional[int] = None) -> EvaluationState:
    """The state of ``metric`` after its reduce: ``tables`` (the reduced, de-duplicated tables, canonical order)
    restricted to ``sample_idx`` and the schema's columns; ``size`` the dataset length given to ``evaluate``.
    Refuses rows without a dataset ``sample_idx`` (numbered in processing order: not mergeable)."""
    from ..functional.limits import AUTO_SAMPLE_ID_BASE
    from ..version import __version__
    schema = metric.row_schema()
    rows = {t: {c: tables[t][c].cpu() for c in ('sample_idx', *cols)} for t, cols in schema.items()}
    first = next(iter(rows.values()), None)
    if first is not None and first['sample_idx'].numel() and int(first['sample_idx'].max()) >= AUTO_SAMPLE_ID_BASE:
        raise ValueError(f'{metric.name}: the samples carry no `sample_idx` (numbered in processing order); an '
                         f'evaluation state needs the dataset index of every sample')
    protocol = getattr(metric, 'protocol', None)
    return EvaluationState(
        metric_type=type(metric).__name__, prefix=str(metric.prefix), settings=metric_settings(metric),
        protocol=getattr(protocol, 'name', protocol), conventions=_json(getattr(metric, 'conventions', None)),
        dataset={'name': (metric.dataset_meta or {}).get('dataset_name'),
                 'num_samples': _dataset_size(metric, size),
                 'gt_hash': getattr(metric, 'state_gt_hash', None)},
        dataset_meta=dict(metric.dataset_meta or {}), version=__version__,
        schema={t: {c: [_dtype_name(d), list(s)] for c, (d, s) in cols.items()} for t, cols in schema.items()},
        tables=rows, position=getattr(metric, 'state_position', None))


def _dataset_size(metric: Any, size: Optional[int]) -> Optional[int]:
    """The dataset length: set by :func:`~mmsgg_eval.metrics.state_paths.set_state_paths` (a shard evaluates fewer samples), else ``size``."""
    known = getattr(metric, 'state_num_samples', None)
    known = size if known is None else known
    return None if known is None else int(known)


def save_state(metric: Any, tables: Tables, path: str, size: Optional[int] = None) -> str:
    """Write the state of ``metric`` (:func:`state_of`) to ``path`` (atomically); return the path."""
    return write_state(state_of(metric, tables, size), path)


# ---------------------------------------------------------------------------------------------- files

def write_state(state: EvaluationState, path: str) -> str:
    """Write ``state`` to ``path`` (safetensors when installed, else ``torch.save`` of plain tensors; renamed
    into place, so a failed write leaves no partial file); return the path."""
    tensors = {f'rows/{t}/{c}': v.contiguous() for t, cols in state.tables.items() for c, v in cols.items()}
    meta_json, meta_kinds = {}, {}
    for key, value in state.dataset_meta.items():
        kind = _array_kind(value)
        if kind is not None:
            tensors[f'meta/{key}'] = torch.as_tensor(value).contiguous()
            meta_kinds[key] = kind
        else:
            meta_kinds[key] = 'tuple' if isinstance(value, tuple) else 'json'
            meta_json[key] = _json(value)
    header = {'format': STATE_FORMAT, 'metric_type': state.metric_type, 'prefix': state.prefix,
              'settings': state.settings, 'protocol': state.protocol, 'conventions': state.conventions,
              'dataset': state.dataset, 'dataset_meta': meta_json, 'dataset_meta_kinds': meta_kinds,
              'version': state.version, 'schema': state.schema, 'sources': state.sources,
              'position': state.position,
              'tables': {t: list(cols) for t, cols in state.tables.items()}}
    text = json.dumps(header, allow_nan=True)
    os.makedirs(osp.dirname(osp.abspath(path)) or '.', exist_ok=True)
    tmp = f'{path}.tmp{os.getpid()}'
    try:
        try:
            from safetensors.torch import save_file
        except ImportError:
            torch.save({'header': text, 'tensors': tensors}, tmp)
        else:
            save_file(tensors, tmp, metadata={_HEADER_KEY: text})
        os.chmod(tmp, 0o666 & ~_umask())  # as every other output (a writer may create its file 0600)
        os.replace(tmp, path)
    finally:
        if osp.exists(tmp):
            os.remove(tmp)
    return path


def _umask() -> int:
    """The process umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def load_state(path: str) -> EvaluationState:
    """Read a state written by :func:`write_state` (either format; nothing is unpickled). Errors name the
    file: missing, not a state, or a state of another format version."""
    from ..io.errors import InputFileError
    if not osp.isfile(path):
        raise FileNotFoundError(f'evaluation state not found: {osp.abspath(path)}')
    try:
        header, tensors = _read(path)
    except Exception as err:  # noqa: BLE001 - any reader failure means "not a state file"
        raise InputFileError(path, f'not an mmsgg_eval evaluation state ({type(err).__name__}: {err})') from None
    if header.get('format') != STATE_FORMAT:
        raise InputFileError(path, f'evaluation state of format {header.get("format")!r}, this version reads '
                                   f'{STATE_FORMAT!r}')
    tables = {t: {c: tensors[f'rows/{t}/{c}'] for c in cols} for t, cols in header['tables'].items()}
    meta = {}
    for key, kind in header['dataset_meta_kinds'].items():
        if kind in ('tensor', 'ndarray'):
            value = tensors[f'meta/{key}']
            meta[key] = value.numpy() if kind == 'ndarray' else value
        else:
            value = header['dataset_meta'][key]
            meta[key] = tuple(value) if kind == 'tuple' else value
    return EvaluationState(
        metric_type=header['metric_type'], prefix=header['prefix'], settings=header['settings'],
        protocol=header['protocol'], conventions=header['conventions'], dataset=header['dataset'],
        dataset_meta=meta, version=header['version'], schema=header['schema'], tables=tables,
        sources=[osp.abspath(path)], position=header.get('position'))


def _read(path: str) -> Tuple[Dict[str, Any], Dict[str, Tensor]]:
    with open(path, 'rb') as f:
        magic = f.read(2)
    if magic == b'PK':  # torch.save's zip container
        blob = torch.load(path, map_location='cpu', weights_only=True)
        return json.loads(blob['header']), blob['tensors']
    from safetensors import safe_open
    with safe_open(path, framework='pt') as f:
        header = json.loads(f.metadata()[_HEADER_KEY])
        return header, {k: f.get_tensor(k) for k in f.keys()}


def _array_kind(value: Any) -> Optional[str]:
    import numpy as np
    if isinstance(value, Tensor):
        return 'tensor'
    if isinstance(value, np.ndarray) and value.dtype != object:
        return 'ndarray'
    return None


def _json(value: Any) -> Any:
    from ..reports import json_safe
    return json_safe(value, nan_as_null=False)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace('torch.', '')


# ---------------------------------------------------------------------------------------------- merging

#: The fields two shards of one evaluation must agree on, with how messages name them.
MATCHED_FIELDS = (('metric_type', 'metric'), ('prefix', 'prefix'), ('settings', 'settings'),
                  ('protocol', 'protocol'), ('conventions', 'conventions'), ('schema', 'row tables'))
MATCHED_DATASET_FIELDS = ('name', 'num_samples', 'gt_hash')


_ABSENT = object()


def _shown(value: Any) -> str:
    return 'not given' if value is _ABSENT else repr(value)


def state_difference(a: EvaluationState, b: EvaluationState) -> Optional[str]:
    """None when ``a`` and ``b`` are shards of one evaluation (same metric, settings, protocol,
    conventions, row tables, dataset, GT and ``dataset_meta``), else a sentence naming the first difference."""
    for attr, what in MATCHED_FIELDS:
        va, vb = getattr(a, attr), getattr(b, attr)
        if va != vb:
            if isinstance(va, dict) and isinstance(vb, dict):
                keys = sorted(k for k in set(va) | set(vb) if va.get(k, _ABSENT) != vb.get(k, _ABSENT))
                detail = '; '.join(f'{k}: {_shown(va.get(k, _ABSENT))} vs {_shown(vb.get(k, _ABSENT))}' for k in keys)
                return f'different {what} ({detail})'
            return f'different {what} ({va!r} vs {vb!r})'
    return ground_truth_difference(a, b)


def ground_truth_difference(a: EvaluationState, b: EvaluationState) -> Optional[str]:
    """None when ``a`` and ``b`` were evaluated on the same ground truth (dataset name and size, GT hash,
    ``dataset_meta``), else a sentence naming the first difference: what merging shards
    (:func:`state_difference`) and comparing runs (:mod:`mmsgg_eval.compare`) both require."""
    for key in MATCHED_DATASET_FIELDS:
        va, vb = a.dataset.get(key), b.dataset.get(key)
        if va != vb:
            label = 'GT (hash of the dataset annotations)' if key == 'gt_hash' else f'dataset {key}'
            return f'different {label} ({va!r} vs {vb!r})'
    meta_a, meta_b = _json(a.dataset_meta), _json(b.dataset_meta)
    if meta_a != meta_b:
        keys = sorted(k for k in set(meta_a) | set(meta_b) if meta_a.get(k) != meta_b.get(k))
        return f'different dataset_meta (entries {", ".join(keys)})'
    return None


def merge_states(states: Sequence[EvaluationState]) -> EvaluationState:
    """One state from states of disjoint shards of one evaluation: rows concatenated and sorted stably by
    ``sample_idx`` (bit for bit the tables of one run over the union). Raises :class:`StateMismatchError`
    naming the two files and the difference, or the samples found in two states."""
    if not states:
        raise ValueError('merge_states: no state given')
    base = states[0]
    seen = base.sample_ids()
    for other in states[1:]:
        diff = state_difference(base, other)
        if diff is not None:
            raise StateMismatchError(f'{other.name}: cannot merge {other.where} with {base.where}: {diff}')
        ids = other.sample_ids()
        both = ids[torch.isin(ids, seen)]
        if both.numel():
            first = ', '.join(str(int(i)) for i in both[:10]) + (', ...' if both.numel() > 10 else '')
            raise StateMismatchError(f'{other.name}: {both.numel()} samples of {other.where} are also in an '
                                     f'earlier state (overlapping shards; first sample_idx: {first})')
        seen = torch.cat([seen, ids])
    if len(states) == 1:
        return base
    tables = {}
    for table, columns in base.tables.items():
        merged = {c: torch.cat([s.tables[table][c] for s in states]) for c in columns}
        order = torch.sort(merged['sample_idx'], stable=True).indices
        tables[table] = {c: v.index_select(0, order) for c, v in merged.items()}
    return replace(base, tables=tables, sources=[p for s in states for p in s.sources])


def missing_samples(state: EvaluationState) -> List[int]:
    """Dataset indices ``0 .. num_samples - 1`` in no row of ``state`` (empty when the size is unknown)."""
    total = state.dataset.get('num_samples')
    if total is None:
        return []
    present = torch.zeros(int(total), dtype=torch.bool)
    ids = state.sample_ids()
    present[ids[(ids >= 0) & (ids < int(total))]] = True
    return (~present).nonzero().squeeze(1).tolist()


def evaluation_order(states: Sequence[EvaluationState]) -> List[EvaluationState]:
    """``states`` in the order of their metrics in the original evaluator (those without a recorded position
    last, in the given order)."""
    return sorted(states, key=lambda s: (s.position is None, s.position or 0))


def shared_objects(states: Sequence[EvaluationState]) -> List[EvaluationState]:
    """``states`` whose equal ``dataset_meta`` are one object, as an evaluator gives its metrics one (so the
    metrics of one run claim distinct report file names: :class:`~mmsgg_eval.metrics.file_claims.FileClaims`), and
    whose equal row tables are one object (so metrics of one compute group share their reduce, summary and
    report files as in the original run: :class:`~mmsgg_eval.metrics.compute_group.ComputeGroup`)."""
    out: List[EvaluationState] = []
    for state in states:
        meta = next((o.dataset_meta for o in out if _json(o.dataset_meta) == _json(state.dataset_meta)), None)
        tables = next((o.tables for o in out if _equal_tables(o.tables, state.tables)), None)
        out.append(replace(state, dataset_meta=state.dataset_meta if meta is None else meta,
                           tables=state.tables if tables is None else tables))
    return out


def _equal_tables(a: Tables, b: Tables) -> bool:
    return a.keys() == b.keys() and all(
        a[t].keys() == b[t].keys() and all(a[t][c].dtype == b[t][c].dtype and torch.equal(a[t][c], b[t][c])
                                           for c in a[t]) for t in a)


# ---------------------------------------------------------------------------------------------- summarising

def summary_tables(state: EvaluationState, metric: Any) -> Tables:
    """The state's rows in the layout of reduced tables for ``metric`` (its schema's tables and columns, plus
    the ``occurrence`` / ``rank`` columns a reduce adds, all 0)."""
    out = {}
    for table, cols in metric.row_schema().items():
        rows = state.tables[table]
        zeros = torch.zeros_like(rows['sample_idx'])
        out[table] = {'sample_idx': rows['sample_idx'], 'occurrence': zeros.to(torch.int32), 'rank': zeros,
                      **{c: rows[c] for c in cols}}
    return out


def summarize_state(state: EvaluationState, metric: Any = None) -> Tuple[Dict[str, float], Dict[str, Any]]:
    """``(keys, summary)`` of a state without writing or logging anything: the unprefixed scalar keys the
    metric returns and its whole summary (``metric.last_report``), from the metric rebuilt from the state's
    settings (or ``metric``, built by :meth:`EvaluationState.build_metric`)."""
    metric = metric if metric is not None else state.build_metric()
    keys = metric.compute_metrics(summary_tables(state, metric))
    return keys, metric.last_report


def evaluate_state(state: EvaluationState, metric: Any = None, **overrides: Any) -> Tuple[Any, Dict[str, float]]:
    """Run the metric's whole ``evaluate()`` on a state (summary, logged report, report files of
    ``report_dir``, ``save_state``): ``(metric, prefixed scalar keys)``, as the original run returned them.
    ``overrides``: constructor arguments such as ``report_dir`` or ``save_state``; or ``metric``, built by
    :meth:`EvaluationState.build_metric` (e.g. to check its outputs first)."""
    metric = metric if metric is not None else state.build_metric(**overrides)
    schema = metric.row_schema()
    if {t: ['sample_idx', *cols] for t, cols in schema.items()} == {t: list(c) for t, c in state.tables.items()}:
        rows = state.tables  # the very object: metrics of one group given equal tables share their work
    else:
        rows = {t: {c: state.tables[t][c] for c in ('sample_idx', *cols)} for t, cols in schema.items()}
    metric.accumulator.add(rows)
    metric.state_gt_hash, metric.state_position = state.dataset.get('gt_hash'), state.position
    metric.state_num_samples = state.dataset.get('num_samples')
    size = state.dataset.get('num_samples')
    return metric, metric.evaluate(size)
