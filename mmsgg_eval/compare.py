"""``python -m mmsgg_eval.compare A B [C ...]``: is run B really better than run A on the same images?

Each run is given as evaluation states (``*.state`` files, a directory of them, or a glob; shards of one metric
are merged, :mod:`mmsgg_eval.metrics.state`) or as prediction files evaluated first with ``--config`` (the
offline CLI's formats, :func:`mmsgg_eval.offline.evaluate_file`). Every later run is compared with the first.

For each metric present in both runs, every key it reports is shown with A, B, the difference Δ = B − A, the
paired-bootstrap interval of Δ and a two-sided p-value. Paired: each replicate resamples the IMAGES with
replacement and uses the SAME image indices for both runs (so what the images have in common - their
difficulty - cancels out of Δ; :mod:`mmsgg_eval.metrics.bootstrap` for the per-image decomposition of every
key). The p-value is ``(1 + 2 min(#{Δ* <= 0}, #{Δ* >= 0})) / (B + 1)`` over the B replicates Δ*. Per-predicate
recalls (``OIRelationMetric``: per-predicate AP_rel, or AP_phr with ``--per-predicate-key AP_phr``, recomputed on
each replicate's rows) get the same treatment, and the predicates whose change is significant after Holm's
step-down correction over all predicates with GT (family-wise error rate ``1 - level``) are named. The interval
of Δ of a key averaging over predicates is marked unreliable by the rule of the single-run intervals
(:func:`mmsgg_eval.metrics.bootstrap.interval_warnings`, on either run's images): a predicate absent from the
images hides its change from Δ and from every replicate alike. A metric whose keys have no per-image
decomposition (DetectionAP) is named as not compared.

Outputs (``--out-dir``, default ``work_dirs/compare``): ``compare.md`` (also printed), ``compare.csv`` (keys),
``compare.per_predicate.csv``, ``compare.json`` and ``compare.per_predicate.png`` (Δ per predicate with its
interval); with ``--report DIR`` also ``DIR/changes.md`` / ``DIR/changes.json``: the images where B gains or
loses GT relations at K against A, each with the cause of the miss on the losing side
(:mod:`mmsgg_eval.analysis.relation_changes`). Runs on different ground truth (dataset name or size, GT hash,
``dataset_meta``: the checks of
:func:`~mmsgg_eval.metrics.state.ground_truth_difference`, as merging shards does) are refused, naming the
difference. Runs over different image sets are refused (naming how many images differ) unless ``--intersect``
(both restricted to the common images); runs with different metric settings, protocols or conventions are
refused unless ``--allow-different-settings`` (the differences are then shown in every output).

The outputs are written by :mod:`mmsgg_eval.compare_outputs`; this module computes the comparison.
"""
import argparse
import contextlib
import io
import os.path as osp
import sys
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from .compare_outputs import format_markdown, write_changes, write_outputs
from .functional.bootstrap import holm_adjust, paired_p_value, percentile_interval
from .functional.limits import NO_HIT as NO_HIT_LIMIT


class CompareError(ValueError):
    """Runs that cannot be compared (the message names the runs and the difference)."""


# ---------------------------------------------------------------------------------------------- loading runs

def is_state_input(item: str) -> bool:
    """True for a ``*.state`` file or glob, or a directory holding states."""
    from .metrics.state import STATE_SUFFIX
    return item.endswith(STATE_SUFFIX) or osp.isdir(item)


def load_run(item: str, config: Optional[str] = None, work_dir: Optional[str] = None,
             allow_missing: bool = False, cfg_options: Optional[dict] = None) -> List[Any]:
    """The merged evaluation states of one run (in the order of the original evaluator): states as given, or
    the states of evaluating the prediction file(s) ``item`` (comma-separated shards) with ``config``."""
    from .offline import state_paths
    from .metrics.state import evaluation_order, load_state, merge_states
    if not is_state_input(item):
        if not config:
            raise CompareError(f'{item}: not an evaluation state; give --config to evaluate prediction files')
        from .offline import evaluate_file
        work_dir = work_dir or tempfile.mkdtemp(prefix='mmsgg_compare_')
        states_dir = osp.join(work_dir, 'states')
        with quiet_evaluation():  # its full report goes to work_dir, not before the comparison
            evaluate_file(config, item.split(',') if ',' in item else item, work_dir=work_dir, progress=False,
                          save_state=states_dir, allow_missing=allow_missing, cfg_options=cfg_options)
        print(f'{item}: evaluated with {config}; its report is in {work_dir} (metrics.json, *.tables.md)')
        item = states_dir
    groups: Dict[Tuple[str, str], List[Any]] = {}
    for path in state_paths([item]):
        state = load_state(path)
        groups.setdefault(state.identity(), []).append(state)
    return evaluation_order([merge_states(g) for g in groups.values()])


@contextlib.contextmanager
def quiet_evaluation() -> Iterator[None]:
    """Keep an evaluation's report off the console: MMEngine's console handlers show warnings and errors
    only, and plain prints are dropped, while it runs (the report files are written as usual)."""
    import logging

    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    handlers = [h for h in logger.handlers if type(h) is logging.StreamHandler]
    levels = [h.level for h in handlers]
    for h in handlers:
        h.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for h, level in zip(handlers, levels):
            h.setLevel(level)


def run_names(items: Sequence[str]) -> List[str]:
    """Short names of the runs for the tables: the file or directory names, or the paths as given when two
    names would be equal (e.g. ``a/states`` and ``b/states``)."""
    names = [osp.basename(osp.normpath(item)) or item for item in items]
    return names if len(set(names)) == len(names) else list(items)


def setting_differences(a: Any, b: Any) -> List[str]:
    """The settings, protocol and conventions of two states of one metric that differ, one line each."""
    out = []
    for attr in ('settings', 'conventions'):
        va, vb = getattr(a, attr) or {}, getattr(b, attr) or {}
        if not isinstance(va, dict) or not isinstance(vb, dict):
            va, vb = {attr: va}, {attr: vb}
        for key in sorted(set(va) | set(vb)):  # a setting left out of a state is the constructor's default
            if va.get(key, '<default>') != vb.get(key, '<default>'):
                out.append(f'{attr} {key}: {va.get(key, "<default>")!r} vs {vb.get(key, "<default>")!r}')
    if a.protocol != b.protocol:
        out.append(f'protocol: {a.protocol!r} vs {b.protocol!r}')
    return out


def restricted(tables: Dict[str, Dict[str, torch.Tensor]], keep: torch.Tensor) -> Dict[str, Dict[str, torch.Tensor]]:
    """``tables`` with only the rows of the samples ``keep`` (sorted ``sample_idx``)."""
    out = {}
    for name, cols in tables.items():
        rows = torch.isin(cols['sample_idx'], keep)
        out[name] = {c: v[rows] for c, v in cols.items()}
    return out


def paired_tables(a: Any, b: Any, names: Tuple[str, str], intersect: bool) -> Tuple[Any, Any, Any, Any, int]:
    """(metric A, tables A, metric B, tables B, number of images) of two states of one metric, on their common
    images with ``intersect``; a :class:`CompareError` naming how many images differ otherwise."""
    from .metrics.state import summary_tables
    ids_a, ids_b = a.sample_ids(), b.sample_ids()
    only_a, only_b = ids_a[~torch.isin(ids_a, ids_b)], ids_b[~torch.isin(ids_b, ids_a)]
    common = ids_a[torch.isin(ids_a, ids_b)]
    if (only_a.numel() or only_b.numel()) and not intersect:
        raise CompareError(f'{a.name}: runs {names[0]} and {names[1]} hold different images: {only_a.numel()} only '
                           f'in {names[0]}, {only_b.numel()} only in {names[1]} ({common.numel()} in both); a '
                           f'paired comparison needs the same images (--intersect compares the common ones)')
    if not common.numel():
        raise CompareError(f'{a.name}: runs {names[0]} and {names[1]} have no image in common')
    out = []
    for state in (a, b):
        metric = state.build_metric()
        tables = summary_tables(state, metric)
        out += [metric, restricted(tables, common) if intersect else tables]
    return out[0], out[1], out[2], out[3], int(common.numel())


# ---------------------------------------------------------------------------------------------- statistics

def delta_rows(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor], deltas: torch.Tensor,
               level: float) -> Dict[str, torch.Tensor]:
    """Point values ``a`` / ``b`` [M], replicate deltas [B, M] -> ``{a, b, delta, low, high, p}`` [M] each."""
    low, high = percentile_interval(deltas, level)
    return {'a': a, 'b': b, 'delta': b - a, 'low': low, 'high': high, 'p': paired_p_value(deltas)}


def paired_keys(stat_a: Any, stat_b: Any, keys: Sequence[str], point_a: Dict[str, float],
                point_b: Dict[str, float], samples: int, seed: int, level: float,
                table: Optional[str] = None) -> Dict[str, Any]:
    """Paired bootstrap of the keys (and of the per-predicate ``table``) of two runs' contributions on the same
    units: ``{'keys': {key: {a, b, delta, low, high, p}}, 'per_predicate': {...} or None}``."""
    from .metrics.bootstrap import replicates
    rep_a, rep_b = replicates([stat_a, stat_b], samples, seed, with_tables=table is not None)
    keys = [k for k in keys if k in rep_a and k in rep_b]
    out: Dict[str, Any] = {'keys': {}, 'per_predicate': None}
    if keys:
        deltas = torch.stack([rep_b[k] - rep_a[k] for k in keys], 1)
        rows = delta_rows(torch.tensor([float(point_a[k]) for k in keys], dtype=torch.float64),
                          torch.tensor([float(point_b[k]) for k in keys], dtype=torch.float64), deltas, level)
        out['keys'] = {k: {n: float(v[i]) for n, v in rows.items()} for i, k in enumerate(keys)}
    if table is not None:
        name = f'table:{table}'
        pa, pb = stat_a.point(with_tables=True)[name][0], stat_b.point(with_tables=True)[name][0]
        rows = delta_rows(pa, pb, rep_b[name] - rep_a[name], level)
        out['per_predicate'] = {'key': table, 'labels': list(stat_a.table_labels), **rows}
    return out


def per_predicate_result(rows: Dict[str, Any], gt_a: List[int], gt_b: List[int], level: float) -> Dict[str, Any]:
    """JSON rows of a per-predicate paired comparison, with Holm-adjusted p-values over the predicates with
    GT in either run and which of them changed significantly (adjusted p < 1 - ``level``)."""
    with_gt = torch.tensor([x + y > 0 for x, y in zip(gt_a, gt_b)], dtype=torch.bool)
    p = torch.where(with_gt, rows['p'], torch.full_like(rows['p'], float('nan')))
    adjusted = holm_adjust(p)
    alpha = 1 - level
    out = []
    for i, label in enumerate(rows['labels']):
        item = {'predicate': label, 'num_gt_a': gt_a[i], 'num_gt_b': gt_b[i],
                **{n: float(rows[n][i]) for n in ('a', 'b', 'delta', 'low', 'high', 'p')},
                'p_holm': float(adjusted[i]), 'significant': bool(adjusted[i] < alpha)}
        out.append(item)
    return {'key': rows['key'], 'alpha': alpha, 'correction': 'Holm step-down over the predicates with GT',
            'num_tested': int(with_gt.sum()), 'rows': out,
            'significant': [r['predicate'] for r in out if r['significant']]}


def predicate_gt_counts(summary: Dict[str, Any], labels: Sequence[str]) -> List[int]:
    """GT relations of each predicate in a summary's per-predicate table (0 when absent)."""
    table = summary.get('per_predicate') or {}
    return [int((table.get(name) or {}).get('num_gt', 0)) for name in labels]


def default_table(stat: Any, requested: Optional[str]) -> Optional[str]:
    """The per-predicate table compared: ``requested`` (None when this metric has no such table:
    :func:`compare_runs` refuses a key no metric has), else K-free ``Recall`` when there is one, else ``AP_rel``
    (``OIRelationMetric``) when there is one, else the largest K."""
    names = stat.table_names
    if not names:
        return None
    if requested is not None:
        return requested if requested in names else None
    return next((n for n in ('Recall', 'AP_rel') if n in names), names[-1])


def compare_metric(a: Any, b: Any, names: Tuple[str, str], options: Dict[str, Any],
                   with_table: bool, tabled: Optional[set] = None) -> Dict[str, Any]:
    """The paired comparison of one metric (two states): keys, per-predicate rows, settings, image count.
    ``tabled``: ``(prefix, table)`` per-predicate tables already shown (by another metric of the same prefix,
    e.g. SGRecall before SGMeanRecall): not shown again. ``available_tables``: this metric's tables."""
    from .metrics.bootstrap import contributions_of, interval_warnings
    from .metrics.state import ground_truth_difference
    other_gt = ground_truth_difference(a, b)
    if other_gt is not None:  # never paired, whatever the options: the images are not the same
        raise CompareError(f'{a.name}: runs {names[0]} and {names[1]} were evaluated on different ground truth: '
                           f'{other_gt}; a paired comparison needs the same dataset')
    differences = setting_differences(a, b)
    if differences and not options['allow_different_settings']:
        raise CompareError(f'{a.name}: runs {names[0]} and {names[1]} were evaluated with different settings ('
                           + '; '.join(differences) + '); --allow-different-settings compares them anyway')
    metric_a, tables_a, metric_b, tables_b, num_images = paired_tables(a, b, names, options['intersect'])
    keys_a, keys_b = metric_a.compute_metrics(tables_a), metric_b.compute_metrics(tables_b)
    summary_a, summary_b = metric_a.last_report, metric_b.last_report
    stat_a, stat_b = contributions_of(metric_a, tables_a), contributions_of(metric_b, tables_b)
    table = default_table(stat_a, options.get('per_predicate_key')) if with_table else None
    if tabled and (a.prefix, table) in tabled:
        table = None
    keys = [k for k in keys_a if k in keys_b]
    result = paired_keys(stat_a, stat_b, keys, summary_a['metrics'], summary_b['metrics'], options['samples'],
                         options['seed'], options['level'], table)
    notes = {**interval_warnings(stat_b, list(result['keys'])), **interval_warnings(stat_a, list(result['keys']))}
    notes = {k: notes[k] for k in result['keys'] if k in notes}
    out = {'metric': a.name, 'prefix': a.prefix, 'num_images': num_images, 'keys': result['keys'],
           'interval_warnings': list(notes), 'interval_notes': notes, 'settings_differences': differences,
           'available_tables': stat_a.table_names, 'per_predicate': None}
    if options.get('report'):
        out['relation_changes'] = metric_changes(metric_a, tables_a, tables_b, names, options.get('report_k'))
    if result['per_predicate'] is not None:
        labels = result['per_predicate']['labels']
        out['per_predicate'] = per_predicate_result(result['per_predicate'], predicate_gt_counts(summary_a, labels),
                                                    predicate_gt_counts(summary_b, labels), options['level'])
        report_order = list(summary_a.get('per_predicate') or {})  # training frequency when known
        rank = {name: i for i, name in enumerate(report_order)}
        out['per_predicate']['rows'].sort(key=lambda r: rank.get(r['predicate'], len(rank)))
        out['per_predicate']['order'] = 'as in the reports (training frequency when known)'
    return out


def without_intervals(state: Any) -> bool:
    """True for a metric whose keys have no per-image decomposition (e.g. DetectionAP): no paired bootstrap."""
    from .metrics.bootstrap import contributions_builder
    from .registry import METRICS, resolve_registered
    import mmsgg_eval  # noqa: F401  (registers the metrics)
    kind = resolve_registered(METRICS, {'type': state.metric_type})['type']
    return isinstance(kind, type) and contributions_builder(kind) is None


def metric_changes(metric: Any, tables_a: Dict[str, Dict[str, torch.Tensor]],
                   tables_b: Dict[str, Dict[str, torch.Tensor]], names: Tuple[str, str],
                   k: Optional[int]) -> Dict[str, Any]:
    """The GT relations gained and lost at K (``k``, default the metric's largest K) by B against A
    (:func:`mmsgg_eval.analysis.relation_changes.relation_changes`), or ``{'unavailable': reason}`` for a
    metric whose rows hold no graph-constrained rank per GT relation."""
    from .analysis.relation_changes import relation_changes
    from .metrics.scene_graph import SceneGraphMetric
    rels = tables_a.get('relations') or {}
    ks = [int(x) for x in getattr(metric, 'topk', ())]
    if not isinstance(metric, SceneGraphMetric) or 'rank_gc' not in rels or 'triplet' not in rels or not ks:
        return {'unavailable': f'{metric.prefix or type(metric).__name__}: its states hold no rank per GT '
                               f'relation (only scene-graph recall metrics list gained and lost relations)'}
    if k is not None and k not in ks:
        raise CompareError(f'--report-k {k}: not a K of {type(metric).__name__} (its K: {ks})')
    try:
        return relation_changes(tables_a, tables_b, k if k is not None else max(ks), metric.classes,
                                metric.predicates, names, getattr(metric, '_rank_cap', NO_HIT_LIMIT))
    except ValueError as err:
        raise CompareError(f'{metric.prefix}: {err}') from None


def run_changes(states_a: Sequence[Any], states_b: Sequence[Any], k: int, names: Tuple[str, str],
                prefix: Optional[str] = None) -> Dict[str, Any]:
    """The GT relations gained and lost at K by run B against run A, given as their merged evaluation states
    (:func:`load_run`), for the HTML report (``browse_results.py --compare-to``): the first
    scene-graph recall metric of B (of key prefix ``prefix`` when given) that A also has, paired as
    ``python -m mmsgg_eval.compare --report`` pairs it (:func:`paired_tables`,
    :func:`metric_changes`, then :func:`~mmsgg_eval.analysis.relation_changes.relation_changes`). Returns its result with
    ``'metric'`` (the prefix) and ``'settings_differences'`` (one line each, shown with the list).

    Refused with a ``ValueError`` naming the runs and the difference: runs on different ground truth
    (:func:`~mmsgg_eval.metrics.state.ground_truth_difference`, as compare), runs over different images, no
    scene-graph recall metric in common, or a K that metric does not report."""
    from .metrics.state import ground_truth_difference
    base = {s.identity(): s for s in states_a}
    pairs = [(base[s.identity()], s) for s in states_b if s.identity() in base
             and (prefix is None or s.prefix == prefix)
             and {'rank_gc', 'triplet'} <= set(s.tables.get('relations', {}))]
    if not pairs:
        raise ValueError(f'runs {names[0]} and {names[1]} have no scene-graph recall metric in common'
                         + (f' with the key prefix {prefix!r}' if prefix else '') + f' ({names[0]}: '
                         f'{sorted(s.name for s in states_a)}; {names[1]}: {sorted(s.name for s in states_b)})')
    a, b = pairs[0]
    other_gt = ground_truth_difference(a, b)
    if other_gt is not None:
        raise ValueError(f'{a.name}: runs {names[0]} and {names[1]} were evaluated on different ground truth: '
                         f'{other_gt}; gained and lost relations need the same dataset')
    ids_a, ids_b = a.sample_ids(), b.sample_ids()
    if not torch.equal(ids_a, ids_b):
        raise ValueError(f'{a.name}: runs {names[0]} and {names[1]} hold different images: '
                         f'{int((~torch.isin(ids_a, ids_b)).sum())} only in {names[0]}, '
                         f'{int((~torch.isin(ids_b, ids_a)).sum())} only in {names[1]}; gained and lost relations '
                         f'need the same images (evaluate both on the whole dataset)')
    metric_a, tables_a, _, tables_b, _ = paired_tables(a, b, names, intersect=False)
    ks = [int(x) for x in getattr(metric_a, 'topk', ())]
    if k not in ks:
        raise ValueError(f'--k {k}: not a K of {a.name} (its K: {ks})')
    out = metric_changes(metric_a, tables_a, tables_b, names, k)
    if 'unavailable' in out:
        raise ValueError(out['unavailable'])
    return {'metric': a.prefix or a.metric_type, **out, 'settings_differences': setting_differences(a, b)}


def compare_runs(runs: Sequence[Sequence[Any]], names: Sequence[str], samples: int = 1000, level: float = 0.95,
                 seed: int = 0, intersect: bool = False, allow_different_settings: bool = False,
                 per_predicate_key: Optional[str] = None, report: bool = False,
                 report_k: Optional[int] = None) -> Dict[str, Any]:
    """Compare every run after the first with the first (lists of merged states of each run); JSON-ready.
    ``report``: also the GT relations each run gains and loses at ``report_k`` (:func:`metric_changes`)."""
    from .metrics.bootstrap import bootstrap_options
    opts = bootstrap_options(dict(samples=samples, level=level, seed=seed), 'mmsgg_eval.compare')
    opts.update(intersect=intersect, allow_different_settings=allow_different_settings,
                per_predicate_key=per_predicate_key, report=report, report_k=report_k)
    base = {s.identity(): s for s in runs[0]}
    comparisons = []
    for run, name in zip(runs[1:], names[1:]):
        pair = (names[0], name)
        shared = [s for s in run if s.identity() in base]
        not_compared = [s.name for s in shared if without_intervals(s)]
        shared = [s for s in shared if not without_intervals(s)]
        if not shared:
            raise CompareError(f'runs {names[0]} and {name} have no metric in common that has paired intervals '
                               f'({sorted(base)} vs {sorted(s.identity() for s in run)}; without per-image keys: '
                               f'{not_compared})')
        tabled: set = set()  # (prefix, table): one table per prefix and kind (SGRecall / SGMeanRecall share one)
        metrics = []
        for state in shared:
            metrics.append(compare_metric(base[state.identity()], state, pair, opts, True, tabled))
            if metrics[-1]['per_predicate'] is not None:
                tabled.add((state.prefix, metrics[-1]['per_predicate']['key']))
        if per_predicate_key is not None and not any(m['per_predicate'] for m in metrics):
            available = sorted({t for m in metrics for t in m['available_tables']})
            raise CompareError(f'--per-predicate-key {per_predicate_key}: not a per-predicate table here '
                               f'(available: {available})')
        comparisons.append({'a': names[0], 'b': name, 'metrics': metrics, 'not_compared': not_compared})
    return {'bootstrap': {'samples': samples, 'level': level, 'seed': seed, 'method': 'paired percentile',
                          'unit': 'image', 'intersect': intersect,
                          'allow_different_settings': allow_different_settings},
            'comparisons': comparisons}


# ---------------------------------------------------------------------------------------------- command line


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    from .runner.arguments import positive_int_arg
    parser = argparse.ArgumentParser(prog='python -m mmsgg_eval.compare',
                                     description='Paired comparison of evaluation runs on the same images')
    parser.add_argument('runs', nargs='+', help='evaluation states (files, directories, globs) of each run, or '
                                                'prediction files (with --config; shards comma-separated; '
                                                'evaluated into OUT_DIR/runs/)')
    from mmengine.config import DictAction
    parser.add_argument('--config', help='config to evaluate prediction files with (offline CLI)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='config overrides (with --config)')
    parser.add_argument('--samples', type=positive_int_arg, default=1000, help='bootstrap replicates')
    parser.add_argument('--level', type=float, default=0.95, help='interval level (default 0.95)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--intersect', action='store_true', help='compare on the images common to both runs')
    parser.add_argument('--allow-different-settings', action='store_true',
                        help='compare runs evaluated with different settings / protocols (shown in the output)')
    parser.add_argument('--per-predicate-key', help='per-predicate table compared (default Recall, AP_rel for '
                                                    'OIRelationMetric, or the largest K; e.g. AP_phr)')
    parser.add_argument('--allow-missing', action='store_true', help='prediction files: score missing samples as '
                                                                     'empty predictions')
    parser.add_argument('--names', nargs='+', metavar='NAME',
                        help='labels of the runs in the tables, one per run (default: the file or folder names)')
    parser.add_argument('--out-dir', default=osp.join('work_dirs', 'compare'))
    parser.add_argument('--report', metavar='DIR', help='also write DIR/changes.md and DIR/changes.json: the '
                                                        'images where B gains or loses GT relations against A')
    parser.add_argument('--report-k', type=positive_int_arg, help='K of --report (default the largest K)')
    parser.add_argument('--debug', action='store_true', help='show the Python traceback of errors')
    args = parser.parse_args(argv)
    if len(args.runs) < 2:
        parser.error('give at least two runs (A B [C ...])')
    if args.names is not None and (len(args.names) != len(args.runs) or len(set(args.names)) != len(args.names)):
        parser.error(f'--names: give {len(args.runs)} different names, one per run (got {args.names})')
    try:
        from .runner.arguments import check_environment
        check_environment()
        names = list(args.names) if args.names else run_names(args.runs)
        runs = [load_run(item, args.config, osp.join(args.out_dir, 'runs', f'{i}.{osp.basename(name)}'),
                         args.allow_missing, args.cfg_options) for i, (item, name) in enumerate(zip(args.runs, names))]
        result = compare_runs(runs, names, args.samples, args.level, args.seed,
                              args.intersect, args.allow_different_settings, args.per_predicate_key,
                              report=bool(args.report), report_k=args.report_k)
        result['outputs'] = write_outputs(result, args.out_dir)
        if args.report:
            result['outputs'].update(write_changes(result, args.report))
    except (ValueError, FileNotFoundError, OSError) as err:
        if args.debug:
            raise
        print(f'{parser.prog}: error: {err}', file=sys.stderr)
        raise SystemExit(1) from None
    print(format_markdown(result))
    print(f'written: {", ".join(result["outputs"].values())}')
    return result


if __name__ == '__main__':
    main()
