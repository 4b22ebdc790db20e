"""The report tables of a summary (:class:`ReportTable`): main results, key families (titles and order from
:mod:`mmsgg_eval.keys`), predicate groups, per-predicate recall, causes, grounding."""
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..keys import FAMILY_ORDER, FAMILY_TITLES
from .values import (HEADLINE_EXTRA, MISSING, _k_label, recall_key, _per_predicate_key, _is_value, _fmt, _group_of,
    _ordered_groups, _per_predicate_caption, Estimate, summary_values)


class ReportTable:
    """One table of a report, rendered by :func:`tables_markdown`, :func:`table_csv` and :func:`tables_latex`.

    ``header``: column names; ``rows``: cells, a string (text) or a number (``None`` / NaN = no value: ``–`` in
    Markdown, ``--`` in LaTeX, empty in CSV); the first ``text_columns`` columns are text (left-aligned), the
    others numbers printed with ``digits[column]`` decimals (default 2; integers as integers). ``name`` is the
    file-name part of its CSV file, ``caption`` one line said above it.
    """

    def __init__(self, name: str, caption: str, header: Sequence[str], rows: Sequence[Sequence[Any]],
                 text_columns: int = 1, digits: Optional[Dict[int, int]] = None) -> None:
        self.name, self.caption = name, caption
        self.header, self.rows = list(header), [list(r) for r in rows]
        self.text_columns = text_columns
        self.digits = dict(digits or {})

    def cell(self, column: int, value: Any, missing: str = MISSING) -> str:
        """The printed form of a cell (Markdown / LaTeX)."""
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        digits = self.digits.get(column, 2)
        if isinstance(value, Estimate) and _is_value(value):
            low, high = (_fmt(v, max(digits - 1, 0)) for v in (value.low, value.high))
            note = f' unreliable: {value.note}' if value.note else ''
            return f'{_fmt(value, digits)} [{low}, {high}]{note}'
        return _fmt(value, digits) if _is_value(value) else missing


def _key_parts(key: str) -> Optional[Tuple[str, str, str]]:
    """``(family, K label, group)`` of a recall-like key (``'mR@50_tail'`` -> ``('mR', '50', 'tail')``,
    ``'Recall'`` -> ``('R', 'all', '')``); None for a key without K (``'InstR'``, ``'AP@50'``, ...)."""
    if key in HEADLINE_EXTRA:
        return None
    for name, family in (('mRecall', 'mR'), ('Recall', 'R')):
        if key == name or key.startswith(name + '_'):
            return family, 'all', key[len(name) + 1:]
    if '@' not in key:
        return None
    family, rest = key.split('@', 1)
    k, _, group = rest.partition('_')
    return family, k, group


def scene_graph_tables(summary: Dict[str, Any], ks: Sequence[Any], dataset: str, mode: str,
                       with_per_predicate: bool = True) -> List[ReportTable]:
    """The tables of a scene-graph summary (values in percent), every key of ``summary['metrics']`` in one:

    1. ``main``: ``| Dataset | Mode | R@K ... | mR@K ... |`` and the keys of :data:`HEADLINE_EXTRA` present
       (``mAP`` / ``AP@50`` of DetectionAP, ``InstR`` / ``PRank`` of sgbench, ``FailureRate`` of the VLM metric);
    2. ``families``: one row per key family (R, ngR, zR, ngzR, A, PairR, mR, ngmR, F, AVG, ...), one column per K;
    3. ``groups``: head/body/tail mean recall for each K (when groups are known);
    4. ``per_predicate``: recall of each predicate at each K in the summary's order (training frequency when
       known) with its group and GT count; ``–`` for a predicate without GT in the evaluated images;
    5. ``other``: any remaining key (``| Key | Value |``), so that nothing computed is left out;
    6. ``no_value``: the keys without a value (NaN, ``summary['no_value']``: a subset, group or family without
       any GT relation in the evaluated images) and why.
    """
    m = summary_values(summary)
    labels = [_k_label(k) for k in ks]
    shown = set()
    cols = [recall_key('R', k) for k in ks] + [recall_key('mR', k) for k in ks]
    cols = [c for c in cols if c in m] + [c for c in HEADLINE_EXTRA if c in m]
    shown.update(cols)
    tables = [ReportTable('main', 'Main results (%)', ['Dataset', 'Mode'] + cols,
                          [[dataset, mode] + [m[c] for c in cols]], text_columns=2)]
    families: Dict[str, Dict[str, str]] = {}
    for key in m:
        parts = _key_parts(key)
        if parts is None or parts[2] or parts[1] == 'rel':  # R@rel / mR@rel: their own table
            continue
        family, k, _ = parts
        families.setdefault(family, {})[k] = key
        if k not in labels:
            labels.append(k)
    order = [f for f in FAMILY_ORDER if f in families] + [f for f in families if f not in FAMILY_ORDER]
    if order:
        used = [k for k in labels if any(k in families[f] for f in order)]
        rows = [[f, FAMILY_TITLES.get(f, f)] + [m.get(families[f].get(k, ''), None) for k in used] for f in order]
        shown.update(key for f in order for key in families[f].values())
        tables.append(ReportTable('families', 'Every key family (%), one column per K', ['Family', 'Meaning']
                                  + ['all' if k == 'all' else f'@{k}' for k in used], rows, text_columns=2))
    groups = _ordered_groups(summary)
    gcols = [(k, g) for k in ks for g in groups if recall_key('mR', k, '_' + g) in m]
    if gcols:
        keys = [recall_key('mR', k, '_' + g) for k, g in gcols]
        shown.update(keys)
        tables.append(ReportTable('groups', 'Mean recall per predicate group (%)', ['Dataset', 'Mode']
                                  + [f'{recall_key("mR", k)} {g}' for k, g in gcols],
                                  [[dataset, mode] + [m[key] for key in keys]], text_columns=2))
    per_pred = summary.get('per_predicate') or {}
    if with_per_predicate and per_pred:
        group_of = _group_of(summary)
        pcols = [k for k in ks if any(_per_predicate_key(k) in row for row in per_pred.values())]
        rows = []
        for name, row in per_pred.items():
            num_gt = int(row.get('num_gt', 0))
            rows.append([name, group_of.get(name, ''), num_gt]
                        + [row.get(_per_predicate_key(k)) if num_gt else None for k in pcols])
        tables.append(ReportTable('per_predicate', _per_predicate_caption(summary, pcols),
                                  ['Predicate', 'Group', '#GT'] + [recall_key('R', k) for k in pcols], rows,
                                  text_columns=2))
    relative = [key for key in ('R@rel', 'mR@rel') if key in m]
    if relative:  # relative recall: K = each image's number of GT relations
        shown.update(relative)
        tables.append(ReportTable('relative', 'Relative recall (%): K = the image\'s number of GT relations',
                                  ['Dataset', 'Mode'] + relative, [[dataset, mode] + [m[key] for key in relative]],
                                  text_columns=2))
    causes = cause_tables(summary, ks)  # where recall is lost (error_analysis=True)
    if causes:
        shown.update(k for k in m if k.startswith('miss@'))
        tables += causes
    rest = [k for k in m if k not in shown]
    if rest:
        tables.append(ReportTable('other', 'Other keys', ['Key', 'Value'], [[k, m[k]] for k in rest]))
    no_value = [e for e in summary.get('no_value') or () if any(k in m for k in e['keys'])]
    if no_value:
        tables.append(ReportTable('no_value', f'Keys without a value ({MISSING} above): nothing to measure',
                                  ['Keys', 'Why'], [[', '.join(k for k in e['keys'] if k in m), e['why']]
                                                    for e in no_value], text_columns=2))
    return tables


def grounding_tables(summary: Dict[str, Any], dataset: str) -> List[ReportTable]:
    """The tables of a ``GroundingPr`` summary: ``main`` (``| Dataset | Protocol | Pr@τ ... | meanIoU | cumIoU |``:
    every key of the summary in its order, Pr in percent, the others (IoUs in [0, 1]) with 4 decimals) and
    ``thresholds`` (hits and Pr per threshold)."""
    m = summary_values(summary)
    pr = [k for k in m if k.startswith('Pr@')]
    ious = [k for k in m if not k.startswith('Pr@')]
    protocol = str(summary.get('protocol', 'exact'))
    op = '>' if summary.get('strict') else '>='
    main = ReportTable('main', f'Grounding accuracy: Pr@τ = % of samples with IoU {op} τ; meanIoU, cumIoU in [0, 1]',
                       ['Dataset', 'Protocol'] + pr + ious, [[dataset, protocol] + [m[k] for k in pr + ious]],
                       text_columns=2, digits={2 + len(pr) + i: 4 for i in range(len(ious))})
    hits = summary.get('hits') or {}
    rows = [[k[3:], int(hits.get(k, 0)), m[k]] for k in pr]
    return [main, ReportTable('thresholds', f'Hits per threshold (IoU {op} τ) of {summary.get("num_samples", 0)} '
                                            f'samples', ['τ', 'Hits', 'Pr (%)'], rows)]


def cause_tables(summary: Dict[str, Any], ks: Sequence[Any]) -> List['ReportTable']:
    """The tables of an error analysis (``summary['causes']`` and ``['per_predicate_causes']``): ``causes``,
    one row per outcome (hit = R@K, then each cause) and one column per K; ``per_predicate_causes``, each
    predicate's R@K and the causes at the largest K. Empty without an error analysis."""
    causes = summary.get('causes')
    m = summary.get('metrics', {})
    if not causes:
        return []
    ks = [k for k in ks if f'miss@{k}_{causes[0]}' in m]
    if not ks:
        return []
    rows = [['hit', 'R@K'] + [m.get(f'R@{k}') for k in ks]]
    rows += [[c, f'miss@K_{c}'] + [m.get(f'miss@{k}_{c}') for k in ks] for c in list(causes) + ['predicate_ng']]
    tables = [ReportTable('causes', 'Where recall@K is lost (%): R@K + the causes = 100 (predicate_ng is a subset '
                          'of predicate)', ['Outcome', 'Key'] + [f'@{k}' for k in ks], rows, text_columns=2)]
    table = summary.get('per_predicate_causes') or {}
    if table:
        k = ks[-1]
        header = ['Predicate', '#GT', f'R@{k}'] + [f'miss@{k}_{c}' for c in causes]
        body = [[name, int(row['num_gt']), row.get(f'R@{k}')] + [row.get(f'miss@{k}_{c}') for c in causes]
                for name, row in table.items()]
        tables.append(ReportTable('per_predicate_causes', f'Where each predicate\'s recall@{k} is lost (%)', header,
                                  body, text_columns=1))
    return tables
