"""Bootstrap confidence intervals of every key of a row metric, from its reduced row tables.

The resampling unit is the IMAGE (one dataset sample): the GT relations of one image share its objects, boxes
and predictions and are not independent, so relations are never resampled on their own. Every key of
SGRecall / SGMeanRecall / SGBenchMetric / VLMSceneGraphMetric / GroundingPr / RelCLIPScore is a function of
per-image sums (a mean of per-image recalls is sum(recall_i) / sum(1); mR@K averages over predicates the ratio
sum(recall_ip) / sum(holds_ip); micro recall is sum(hits_i) / sum(count_i); F@K and AVG@K combine R@K and
mR@K), so a :class:`Contributions` holds, per image, the [N, C] matrix of those summands and, per key, how
the key follows from column totals. A replicate with resampling counts ``w`` [N] is the same formula on
``w @ matrix``; B replicates are one [B, N] x [N, C] product (chunked, :mod:`mmsgg_eval.functional.bootstrap`).
The keys that are not such functions, the VLM metric's COCO ``AP@50`` and the AP keys of ``OIRelationMetric``, are
recomputed per replicate on the resampled rows (images drawn twice become two images).

Each metric builds its own :class:`Contributions` in a ``contributions(tables)`` method from the same declarations
as its summary (the scene-graph families: :mod:`mmsgg_eval.metrics.key_values`; the other metrics' row keys:
:mod:`mmsgg_eval.metrics.row_keys`); this module holds what they share: the per-unit blocks (:func:`recall_block`,
:func:`per_predicate_block`, :func:`predicate_mean`), the replicates, the intervals and their reliability.

The units are the rows of the metric's per-sample table in ``sample_idx`` order (the reduced tables are sorted
so on every world size); an image a metric does not evaluate (no GT relation, or skipped) contributes zeros,
so two runs on the same samples resample the very same units (paired comparison, :mod:`mmsgg_eval.compare`).
A replicate with all counts 1 reproduces the reported keys (checked at run time: a key whose formula no
longer matches the metric's summary gets no interval and a warning).

A key that averages over predicates (mR@K, ngmR@K, group and subset mean recalls; any key built by
:func:`predicate_mean`) records the GT relations of each predicate it averages over, per image
(:attr:`Contributions.support`); F@K / AVG@K record the keys they combine (:attr:`Contributions.depends`). :func:`interval_warnings` marks the
interval of such a key as unreliable when too many of its predicates are rare in the evaluated images: a predicate
absent from them counts 0 (or drops out) in the estimate and in every replicate alike, so the replicates cannot see
the bias it causes and the percentile interval misses the population value (docs/metrics.md, measured coverage).
"""
import logging
import math
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional.bootstrap import percentile_interval, ratio, resample_counts, weighted_totals
from ..functional.recall import NO_VALUE, hits_per_k
from .options import bootstrap_options

Tables = Dict[str, Dict[str, Tensor]]

#: relative tolerance between a key and its all-ones replicate (the sums are taken in another order)
POINT_RTOL = 1e-9

Block = Callable[[Tensor], Tensor]

#: a predicate with fewer GT relations than this in the evaluated images is rare (for :func:`interval_warnings`)
RARE_GT = 5
#: the interval of a key averaging over predicates is unreliable when at least this share of them are rare
RARE_SHARE = 0.2


class Contributions:
    """Per-unit summands of one evaluation's keys and the formulas of the keys on their column totals.

    ``units``: [N] sorted ``sample_idx`` of the resampled units. :meth:`add` appends [N] or [N, c] summands and
    returns their columns; :attr:`blocks` are ``(key names, fn)`` pairs where ``fn(totals [b, C])`` gives
    [b, len(names)] values; :attr:`derived` functions add keys computed from other keys' values;
    :attr:`tables` ``{name: fn}`` give [b, P] per-predicate values (percent) named by :attr:`table_labels`;
    :attr:`resampled` ``{key: fn(counts [N])}`` keys recomputed per replicate, :attr:`resampled_tables`
    ``{name: fn(counts [N]) -> [P]}`` per-predicate values (percent) recomputed per replicate (the AP of
    ``OIRelationMetric``); :attr:`support` ``{key: (gt [N, P],
    members [M])}``: the GT relations of each predicate in each unit's evaluated relations and the M predicates
    a key averages over (:meth:`gt_support`); :attr:`depends` ``{key: [keys]}`` the keys a derived key is
    computed from (both read by :func:`interval_warnings`).
    """

    def __init__(self, units: Tensor) -> None:
        self.units = units.long()
        self._columns: List[Tensor] = []
        self._width = 0
        self._matrix: Optional[Tensor] = None
        self.blocks: List[Tuple[List[str], Block]] = []
        self.derived: List[Callable[[Dict[str, Tensor]], Dict[str, Tensor]]] = []
        self.tables: Dict[str, Block] = {}
        self.table_labels: List[str] = []
        self.resampled: Dict[str, Callable[[Tensor], float]] = {}
        self.resampled_tables: Dict[str, Callable[[Tensor], Tensor]] = {}
        self.support: Dict[str, Tuple[Tensor, Tensor]] = {}
        self.depends: Dict[str, List[str]] = {}
        self._memo: Dict[int, Tensor] = {}

    @property
    def table_names(self) -> List[str]:
        """The per-predicate tables: :attr:`tables` then :attr:`resampled_tables`."""
        return list(self.tables) + list(self.resampled_tables)

    @property
    def num_units(self) -> int:
        return int(self.units.numel())

    def unit_of(self, sample_idx: Tensor) -> Tensor:
        """[n] position in :attr:`units` of each ``sample_idx`` (every one must be a unit)."""
        pos = torch.searchsorted(self.units, sample_idx.long()).clamp(max=max(self.num_units - 1, 0))
        if sample_idx.numel() and not bool((self.units[pos] == sample_idx.long()).all()):
            raise ValueError('bootstrap: a row belongs to a sample absent from the per-sample table')
        return pos

    def add(self, values: Tensor) -> slice:
        """Append [N] or [N, c] per-unit summands; returns their column slice."""
        values = values.double().reshape(self.num_units, -1)
        self._columns.append(values)
        self._matrix = None
        start, self._width = self._width, self._width + values.shape[1]
        return slice(start, self._width)

    def matrix(self) -> Tensor:
        """[N, C] float64 summands of every column."""
        if self._matrix is None:
            self._matrix = torch.cat(self._columns, 1) if self._columns else torch.zeros((self.num_units, 0),
                                                                                        dtype=torch.float64)
        return self._matrix

    def memo(self, fn: Block) -> Block:
        """``fn`` evaluated once per :meth:`evaluate` call (several keys read one per-predicate table)."""
        def cached(totals: Tensor) -> Tensor:
            if id(fn) not in self._memo:
                self._memo[id(fn)] = fn(totals)
            return self._memo[id(fn)]
        return cached

    def evaluate(self, totals: Tensor, with_tables: bool = False) -> Dict[str, Tensor]:
        """``{key: [b]}`` (and ``{'table:NAME': [b, P]}`` with ``with_tables``) of replicates with column
        ``totals`` [b, C]."""
        self._memo = {}
        out: Dict[str, Tensor] = {}
        for names, fn in self.blocks:
            values = fn(totals)
            for j, name in enumerate(names):
                out[name] = values[:, j]
        for fn in self.derived:
            out.update(fn(out))
        if with_tables:
            out.update({f'table:{name}': fn(totals) for name, fn in self.tables.items()})
        self._memo = {}
        return out

    def gt_support(self, key: str, units: Optional[Tensor] = None) -> Tensor:
        """[M] GT relations of each predicate ``key`` averages over, in the units ``units`` (a [N] bool mask or
        indices; default all: the evaluated images)."""
        gt, members = self.support[key]
        return (gt if units is None else gt[units]).sum(0).index_select(0, members)

    def point(self, with_tables: bool = False) -> Dict[str, Tensor]:
        """The all-ones replicate (the evaluated sample itself): ``{key: [1]}``."""
        ones = torch.ones((1, self.num_units), dtype=torch.float64)
        values = self.evaluate(weighted_totals(ones, self.matrix()), with_tables)
        for key, fn in self.resampled.items():
            values[key] = torch.tensor([fn(ones[0])], dtype=torch.float64)
        if with_tables:
            values.update({f'table:{name}': fn(ones[0])[None] for name, fn in self.resampled_tables.items()})
        return values

    def rename(self, mapping: Callable[[str], Optional[str]]) -> None:
        """Rename (or drop, ``mapping`` -> None) every key, table and :attr:`support`; the :attr:`derived` keys
        (and :attr:`depends`) are dropped."""
        blocks = []
        for names, fn in self.blocks:
            new = [mapping(n) for n in names]
            keep = [j for j, n in enumerate(new) if n is not None]
            if keep:
                blocks.append(([new[j] for j in keep], lambda t, fn=fn, keep=keep: fn(t)[:, keep]))
        self.blocks, self.derived, self.depends = blocks, [], {}
        self.tables = {mapping(n): fn for n, fn in self.tables.items() if mapping(n) is not None}
        self.resampled_tables = {mapping(n): fn for n, fn in self.resampled_tables.items() if mapping(n) is not None}
        self.support = {mapping(n): v for n, v in self.support.items() if mapping(n) is not None}


# ---------------------------------------------------------------------------------------------- recall blocks

def recall_block(c: Contributions, rank: Tensor, unit: Tensor, ks: Sequence[int], average: str,
                 mask: Optional[Tensor] = None, empty: float = 0.0) -> Block:
    """[b, K] recall (fraction) of the relations ``rank`` / ``unit`` (optionally ``mask``-selected): mean over
    units holding one of them of the per-unit recall (``'image'``), or hits / relations (``'micro'``);
    ``empty`` in a replicate holding none of them (NaN for a subset, as the metric's summary)."""
    if mask is not None:
        rank, unit = rank[mask], unit[mask]
    count = torch.bincount(unit, minlength=c.num_units).double()
    hits = hits_per_k(rank, unit, c.num_units, ks)
    if average == 'micro':
        num, den = c.add(hits), c.add(count)
    else:
        num, den = c.add(hits / count.clamp(min=1)[:, None]), c.add((count > 0).double())
    return lambda t: ratio(t[:, num], t[:, den].expand(-1, len(ks)), empty)


def per_predicate_block(c: Contributions, rank: Tensor, predicate: Tensor, unit: Tensor, num_predicates: int,
                        ks: Sequence[int], average: str, den: Optional[slice] = None) -> Tuple[Block, slice]:
    """([b, K, P] per-predicate recall, the presence columns): for predicate p, the mean over units holding p
    of their recall of p (``'image'``, legacy mR) or its hits / relations (``'micro'``). ``den``: presence
    columns already added for the same relations. The block's ``gt_counts`` [N, P] are the relations of each
    predicate in each unit (the support :func:`predicate_mean` records)."""
    n, k = c.num_units, len(ks)
    key = unit * num_predicates + predicate
    count = torch.bincount(key, minlength=n * num_predicates).double().view(n, num_predicates)
    hits = hits_per_k(rank, key, n * num_predicates, ks).view(n, num_predicates, k)
    if average == 'micro':
        num = c.add(hits.transpose(1, 2).reshape(n, -1))
        den = c.add(count) if den is None else den
    else:
        num = c.add((hits / count.clamp(min=1)[..., None]).transpose(1, 2).reshape(n, -1))
        den = c.add((count > 0).double()) if den is None else den
    block = c.memo(lambda t: ratio(t[:, num].view(-1, k, num_predicates),
                                   t[:, den][:, None, :].expand(-1, k, -1)))
    block.gt_counts = count  # type: ignore[attr-defined]
    return block, den


def predicate_mean(per_pred: Block, presence: slice, members: Sequence[int], mode: str,
                   empty: float = NO_VALUE) -> Block:
    """[b, K] mean of the per-predicate recalls of ``members``: over all of them (``'all'``, an absent one
    counts 0) or over those present in the replicate (``'present'``); ``empty`` when no member is present in
    the replicate (NaN for a group, 0 for all predicates: :func:`~mmsgg_eval.functional.recall.mean_recall`).
    The block's ``support`` is ``(per_pred.gt_counts [N, P], members [M])`` (:func:`put` records it per key)."""
    idx = torch.as_tensor(list(members), dtype=torch.long)

    def mean(t: Tensor) -> Tensor:
        values = per_pred(t).index_select(2, idx)
        held = (t[:, presence].index_select(1, idx) > 0).double()[:, None, :]
        count = held.sum(2).expand(-1, values.shape[1])
        if mode == 'present':
            return ratio((values * held).sum(2), count, empty)
        return torch.where(count > 0, values.sum(2) / max(idx.numel(), 1), torch.full_like(count, empty))
    gt_counts = getattr(per_pred, 'gt_counts', None)
    if gt_counts is not None:
        mean.support = (gt_counts, idx)  # type: ignore[attr-defined]
    return mean


def put(c: Contributions, family: str, labels: Sequence[Any], block: Block, suffix: str = '',
        scale: float = 100.0) -> None:
    """Keys ``{family}@{label}{suffix}`` from the columns of ``block`` (times ``scale``); a block averaging
    over predicates (its ``support``, :func:`predicate_mean`) records it for each key."""
    names = [f'{family}@{k}{suffix}' for k in labels]
    c.blocks.append((names, lambda t: scale * block(t)))
    support = getattr(block, 'support', None)
    if support is not None:
        c.support.update({name: support for name in names})


def contributions_builder(metric: Any) -> Optional[Callable[[Any, Tables], Contributions]]:
    """The metric's own ``contributions(tables)`` method (every metric with per-image keys declares one, beside
    its summary), None for a metric without it (e.g. DetectionAP). ``metric``: a metric or a metric class."""
    kind = metric if isinstance(metric, type) else type(metric)
    return getattr(kind, 'contributions', None)


def contributions_of(metric: Any, tables: Tables) -> Contributions:
    """The :class:`Contributions` of a metric's reduced tables (a ``TypeError`` for a metric without them)."""
    builder = contributions_builder(metric)
    if builder is None:
        raise TypeError(f'{type(metric).__name__}: no bootstrap intervals (not a row metric with per-image keys)')
    return builder(metric, tables)


def set_bootstrap(metrics: Sequence[Any], samples: Optional[int]) -> None:
    """``--bootstrap N`` of the CLIs: intervals from ``samples`` image resamples (default level and seed) on
    every metric of ``metrics`` that has them (a ``contributions()`` method); a metric's own ``bootstrap=`` is
    kept; one warning names the metrics without intervals. None: nothing."""
    if not samples:
        return
    without = []
    for metric in metrics:
        if contributions_builder(metric) is None:
            without.append(type(metric).__name__)
        elif getattr(metric, 'bootstrap', None) is None:
            metric.bootstrap = bootstrap_options(int(samples), type(metric).__name__)
    if without:
        _warn(f'--bootstrap: no intervals for {", ".join(without)} (no per-image decomposition of its keys: '
              f'no contributions() method); its keys are reported without intervals')


# ---------------------------------------------------------------------------------------------- replicates

def replicates(stats: Sequence[Contributions], samples: int, seed: int,
               with_tables: bool = False) -> List[Dict[str, Tensor]]:
    """``{key: [samples]}`` replicate values of each of ``stats``, all resampled with the SAME counts (their
    units must be equal: a paired bootstrap when there are several)."""
    units = stats[0].units
    for s in stats[1:]:
        if not torch.equal(s.units, units):
            raise ValueError('bootstrap: the evaluations do not hold the same samples')
    matrices = [s.matrix().float() for s in stats]  # replicate sums in float32 (see weighted_totals)
    parts: List[Dict[str, List[Tensor]]] = [{} for _ in stats]
    for counts in resample_counts(int(units.numel()), samples, seed, dtype=torch.float32):
        for s, mat, part in zip(stats, matrices, parts):
            values = s.evaluate(weighted_totals(counts, mat), with_tables)
            for key, fn in s.resampled.items():
                values[key] = torch.tensor([fn(row) for row in counts], dtype=torch.float64)
            if with_tables:
                for name, fn in s.resampled_tables.items():
                    values[f'table:{name}'] = torch.stack([fn(row).double() for row in counts])
            for key, v in values.items():
                part.setdefault(key, []).append(v)
    return [{key: torch.cat(v) for key, v in part.items()} for part in parts]


def checked_keys(stat: Contributions, reported: Mapping[str, float], owner: str) -> List[str]:
    """The keys of ``reported`` whose all-ones replicate equals the reported value; one warning names the
    keys left without an interval (no formula, or a formula that no longer matches)."""
    point = stat.point()
    good, bad = [], []
    for key, value in reported.items():
        got = point.get(key)
        v = float(value)
        same = got is not None and (math.isclose(float(got[0]), v, rel_tol=POINT_RTOL, abs_tol=1e-9) or
                                    (math.isnan(v) and math.isnan(float(got[0]))))
        (good if same else bad).append(key)
    if bad:
        _warn(f'{owner}: no bootstrap interval for {bad} (their per-image decomposition does not reproduce '
              f'the reported value)')
    return good


def _warn(message: str) -> None:
    """A warning and the same line in the log."""
    from mmengine.logging import print_log
    warnings.warn(message, UserWarning)
    print_log(message, logger='current', level=logging.WARNING)


# ---------------------------------------------------------------------------------------------- reliability

#: how :func:`interval_warnings` decides, in words (``bootstrap['unreliable_when']`` of a summary)
UNRELIABLE_RULE = (f'the key averages over predicates and at least {RARE_SHARE:.0%} of them have fewer than '
                   f'{RARE_GT} GT relations in the evaluated images (absent or rare predicates bias the estimate '
                   f'and every replicate alike)')


def support_note(gt_counts: Tensor, min_gt: int = RARE_GT, share: float = RARE_SHARE) -> Optional[str]:
    """``'14 of 56 predicates with < 5 GT relations'`` when at least ``share`` of the predicates a key averages
    over (``gt_counts`` [M]: their GT relations in the evaluated images) have fewer than ``min_gt``; None
    otherwise (the percentile interval is then trusted)."""
    total = int(gt_counts.numel())
    rare = int((gt_counts < min_gt).sum())
    if not total or not rare or rare < share * total - 1e-9:  # (1e-9: 0.2 * 15 is 3.0000000000000004)
        return None
    return f'{rare} of {total} predicates with < {min_gt} GT relations'


def interval_warnings(stat: Contributions, keys: Sequence[str], units: Optional[Tensor] = None) -> Dict[str, str]:
    """``{key: reason}`` of the ``keys`` whose percentile interval is unreliable: a key averaging over
    predicates (:attr:`Contributions.support`) by :func:`support_note`, a derived key (F@K, AVG@K:
    :attr:`Contributions.depends`) through the keys it combines. Keys that do not average over predicates
    (R@K, zR@K, grounding, ...) are never marked. ``units``: judge the evaluation restricted to these units
    (:meth:`Contributions.gt_support`; default all). Coverage measured in docs/metrics.md."""
    def note(key: str, seen: Tuple[str, ...] = ()) -> Optional[str]:
        if key in stat.support:
            return support_note(stat.gt_support(key, units))
        for source in stat.depends.get(key, ()):
            found = None if source in seen else note(source, seen + (key,))
            if found is not None:
                return f'{found} (in {source})'
        return None
    out = {}
    for key in keys:
        reason = note(key)
        if reason is not None:
            out[key] = reason
    return out


def bootstrap_summary(metric: Any, tables: Tables, summary: Dict[str, Any],
                      options: Dict[str, Any]) -> Dict[str, Any]:
    """``{'intervals': {key: [low, high]}, 'bootstrap': settings, 'interval_warnings': [key],
    'interval_notes': {key: reason}}`` of every key of ``summary['metrics']`` (percentile intervals of image
    resamples, values in the keys' units; the keys whose interval is unreliable, :func:`interval_warnings`)."""
    stat = contributions_of(metric, tables)
    keys = checked_keys(stat, summary['metrics'], f'{type(metric).__name__} ({metric.prefix})')
    values = replicates([stat], options['samples'], options['seed'])[0]
    intervals = {}
    for key in keys:
        low, high = percentile_interval(values[key][:, None], options['level'])
        intervals[key] = [float(low[0]), float(high[0])]
    notes = interval_warnings(stat, keys)
    return {'intervals': intervals,
            'bootstrap': {**options, 'method': 'percentile', 'unit': 'image', 'num_units': stat.num_units,
                          'unreliable_when': UNRELIABLE_RULE},
            'interval_warnings': list(notes), 'interval_notes': notes}


def format_intervals(summary: Dict[str, Any], keys: Optional[Mapping[str, Any]] = None) -> str:
    """The logged block of bootstrap intervals: ``R@20 41.36 [39.9, 42.8]  ...``, six a line (an unreliable one
    on a line of its own, followed by ``unreliable: REASON``, and one line saying when that is); ``keys``: only
    the intervals of these keys (the ones a metric returns: SGRecall and SGMeanRecall sharing a summary each log
    their own), default all."""
    info, intervals, m = summary.get('bootstrap'), summary.get('intervals') or {}, summary.get('metrics', {})
    if keys is not None:
        intervals = {k: v for k, v in intervals.items() if k in keys}
    if not info or not intervals:
        return ''
    head = (f'{100 * info["level"]:g}% bootstrap intervals ({info["samples"]} resamples of the '
            f'{info["num_units"]} images, percentile method, seed {info["seed"]}):')
    notes = summary.get('interval_notes') or {}
    lines, row = [head], []
    for k, (lo, hi) in intervals.items():
        if k not in m:
            continue
        cell = f'{k} {m[k]:.2f} [{lo:.1f}, {hi:.1f}]'
        if k in notes:  # a marked interval takes a line of its own
            lines += ['  ' + '  '.join(row)] if row else []
            lines.append(f'  {cell} unreliable: {notes[k]}')
            row = []
            continue
        row.append(cell)
        if len(row) == 6:
            lines.append('  ' + '  '.join(row))
            row = []
    lines += ['  ' + '  '.join(row)] if row else []
    if any(k in notes for k in intervals):
        lines.append(f'unreliable: the interval is too narrow or misplaced when {info.get("unreliable_when", "")}'
                     f' (docs/metrics.md)')
    return '\n'.join(lines)


def add_intervals(metric: Any, tables: Tables, summary: Dict[str, Any]) -> None:
    """Add ``intervals`` and ``bootstrap`` (:func:`bootstrap_summary` with ``metric.bootstrap``) to ``summary``;
    reused from the member of the metric's compute group that computed them from the same tables with equal
    summary settings (equal summaries), so SGRecall and SGMeanRecall resample once."""
    options = metric.bootstrap
    group, settings = getattr(metric, '_group', None), metric.summary_key()
    key = (settings, tuple(sorted(options.items())))
    shared = group is not None and settings is not None
    result = group.bootstrap_result(key, tables) if shared else None
    if result is None:
        result = bootstrap_summary(metric, tables, summary, options)
        if shared:
            group.record_bootstrap(key, tables, result)
    summary.update({'intervals': dict(result['intervals']), 'bootstrap': dict(result['bootstrap']),
                    'interval_warnings': list(result['interval_warnings']),
                    'interval_notes': dict(result['interval_notes'])})
