"""Human-readable reports: the legacy-style ``SGG eval`` text block, per-predicate tables, and report files
(``metrics.json``, a per-predicate bar chart PNG, the tables as Markdown, LaTeX (booktabs) and CSV) written by
:func:`write_scene_graph_reports` / :func:`write_grounding_reports`."""
import json
import os
import os.path as osp
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .keys import FAMILY_ORDER, FAMILY_TITLES  # the report families: titles and order, declared with the keys


def _family_line(name: str, keys: Dict[str, float], ks: Sequence[int], suffix: str = '') -> str:
    cells = [f'{name}@{k}{suffix}: {_fmt(keys[f"{name}@{k}{suffix}"], 4)}' for k in ks if f'{name}@{k}{suffix}' in keys]
    return '  '.join(cells)



def format_scene_graph_report(summary: Dict[str, Any], keys: Dict[str, float], mode: str, dataset: str,
                              metric_name: str, ks: Sequence[int], with_per_predicate: bool = True) -> str:
    """Text block in the spirit of the legacy ``SGG eval:`` output (values in percent)."""
    missing = summary.get('num_missing_predictions') or 0
    missing_text = f' | without prediction={missing} (recall 0)' if missing else ''
    lines = [f'====== {metric_name} | mode={mode} | dataset={dataset} | images evaluated={summary["num_images"]}'
             f' (of {summary["num_samples"]}){missing_text} | GT relations={summary["num_gt_relations"]} ======']
    families = []
    for key in keys:
        fam = key.split('@')[0]
        if fam not in families:
            families.append(fam)
    for fam in families:
        title = FAMILY_TITLES.get(fam, fam)
        if not _family_line(fam, keys, ks):  # keys without a plain K (miss@K_cause, stage_inst_*): own lines
            continue
        lines.append(f'SGG eval: {_family_line(fam, keys, ks):<70s} for mode={mode}, type={title}.')
        for group in summary.get('groups', {}):
            if fam == 'mR' and any(f'mR@{k}_{group}' in keys for k in ks):
                lines.append(f'SGG eval: {_family_line("mR", keys, ks, "_" + group):<70s} '
                             f'for mode={mode}, type=Mean recall ({group} predicates).')
    zs = summary.get('zeroshot')
    if zs and any(k.startswith(('zR', 'ngzR')) for k in keys):
        lines.append(f'Zero-shot set: {zs["size"]} triplets ({zs["source"]}), sha1 {zs["sha1"]}')
    if with_per_predicate and summary.get('per_predicate'):
        lines.append(format_per_predicate_table(summary['per_predicate'], ks, mode, recall_average_of(summary)))
    return '\n'.join(lines)


def format_per_predicate_table(per_predicate: Dict[str, Dict[str, float]], ks: Sequence[int], mode: str,
                               recall_average: Optional[str] = None) -> str:
    """Fixed-width per-predicate recall table (rows in the given order: training frequency when known); a
    predicate without GT relations shows ``–``. ``recall_average`` ('image' / 'micro') is named in the title."""
    name_w = max([len('predicate')] + [len(p) for p in per_predicate])
    header = f'{"predicate":<{name_w}}  {"#GT":>7}  ' + '  '.join(f'{"R@" + str(k):>8}' for k in ks)
    how = {'image': 'image-averaged, ', 'micro': 'pooled over images, '}.get(recall_average or '', '')
    lines = [f'Per-predicate recall ({mode}, {how}sorted by training frequency when known; – = no GT):', header,
             '-' * len(header)]
    for name, row in per_predicate.items():
        no_gt = not row.get('num_gt', 0)
        lines.append(f'{name:<{name_w}}  {row.get("num_gt", 0):>7d}  '
                     + '  '.join(f'{"–" if no_gt else format(row[f"R@{k}"], ".2f"):>8}' for k in ks))
    return '\n'.join(lines)


# ---------------------------------------------------------------------------------------------- report files
# ``write_scene_graph_reports`` turns the summary of a scene-graph evaluation (``metric.last_report`` of
# SGRecall / SGMeanRecall / SGBenchMetric / VLMSceneGraphMetric) into files a person can look at. A K is an int
# (keys ``R@K``, ``mR@K``, ``mR@K_head`` and per-predicate ``R@K``), another string such as ``'inf'`` (keys
# ``R@inf``; SGBenchMetric) or ``'all'`` for the K-free keys of the VLM metric (``Recall``, ``mRecall``,
# ``mRecall_head`` and per-predicate ``Recall``). The same :class:`ReportTable` s are written as Markdown, CSV
# and LaTeX (booktabs), see :func:`write_tables`.

GROUP_ORDER = ('head', 'body', 'tail')
#: Keys without K shown in the main table when the summary has them (detection AP, sgbench, VLM).
HEADLINE_EXTRA = ('mAP', 'AP@50', 'InstR', 'PRank', 'FailureRate')
#: Row order of the key-family table (families not listed follow in the order met).
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
    """The tables of a ``GroundingPr`` summary: ``main`` (``| Dataset | Protocol | Pr@τ ... | meanIoU | cumIoU |``,
    Pr in percent, IoUs in [0, 1] with 4 decimals) and ``thresholds`` (hits and Pr per threshold)."""
    m = summary_values(summary)
    pr = [k for k in m if k.startswith('Pr@')]
    ious = [k for k in ('meanIoU', 'cumIoU') if k in m]
    protocol = str(summary.get('protocol', 'exact'))
    op = '>' if summary.get('strict') else '>='
    main = ReportTable('main', f'Grounding accuracy: Pr@τ = % of samples with IoU {op} τ; meanIoU, cumIoU in [0, 1]',
                       ['Dataset', 'Protocol'] + pr + ious, [[dataset, protocol] + [m[k] for k in pr + ious]],
                       text_columns=2, digits={2 + len(pr) + i: 4 for i in range(len(ious))})
    hits = summary.get('hits') or {}
    rows = [[k[3:], int(hits.get(k, 0)), m[k]] for k in pr]
    return [main, ReportTable('thresholds', f'Hits per threshold (IoU {op} τ) of {summary.get("num_samples", 0)} '
                                            f'samples', ['τ', 'Hits', 'Pr (%)'], rows)]


def markdown_cell(text: Any) -> str:
    """``text`` safe in one cell of a Markdown (GFM) table: ``|`` escaped as ``\\|`` (also after a backslash,
    which would otherwise escape the escape), line breaks as spaces. THE escaper of every Markdown writer
    (report tables, ``compare.md``, the relation-alignment report)."""
    text = str(text).replace('\r\n', ' ').replace('\n', ' ').replace('\r', ' ')
    return text.replace('\\|', '\\\\|').replace('|', '\\|') if '|' in text else text


_md_cell = markdown_cell


def tables_markdown(title: str, tables: Sequence[ReportTable]) -> str:
    """Markdown: ``### title``, then each table with its caption in italics."""
    lines = [f'### {title}']
    for table in tables:
        lines += ['', f'*{table.caption}*', '',
                  '| ' + ' | '.join(_md_cell(h) for h in table.header) + ' |',
                  '|' + '---|' * table.text_columns + '---:|' * (len(table.header) - table.text_columns)]
        for row in table.rows:
            lines.append('| ' + ' | '.join(_md_cell(table.cell(i, v)) for i, v in enumerate(row)) + ' |')
    return '\n'.join(lines) + '\n'


def table_csv(table: ReportTable) -> str:
    """CSV (``csv`` module, excel dialect): the header, then the rows; numbers at full precision (``repr``),
    no value = empty cell."""
    import csv
    import io
    out = io.StringIO()
    writer = csv.writer(out, lineterminator='\n')
    writer.writerow(table.header)
    for row in table.rows:
        writer.writerow([v if isinstance(v, str) else repr(v) if _is_value(v) else '' for v in row])
    return out.getvalue()


_LATEX_SPECIALS = {'\\': r'\textbackslash{}', '&': r'\&', '%': r'\%', '$': r'\$', '#': r'\#', '_': r'\_',
                   '{': r'\{', '}': r'\}', '~': r'\textasciitilde{}', '^': r'\textasciicircum{}',
                   '—': '---', '–': '--', 'τ': r'$\tau$', '≥': r'$\geq$', '×': r'$\times$',
                   '<': r'\textless{}', '>': r'\textgreater{}'}


def latex_escape(text: str) -> str:
    """Text safe in LaTeX: ``\\ & % $ # _ { } ~ ^ < >`` escaped, dashes as ``---`` / ``--``, τ ≥ × in math
    mode."""
    return ''.join(_LATEX_SPECIALS.get(ch, ch) for ch in str(text))


def tables_latex(title: str, tables: Sequence[ReportTable]) -> str:
    """LaTeX: one ``table`` environment per table, a booktabs ``tabular`` (``\\toprule`` / ``\\midrule`` /
    ``\\bottomrule``; needs ``\\usepackage{booktabs}``) captioned with the title and the table's caption."""
    lines = [f'% {latex_escape(title)}', '% needs \\usepackage{booktabs}']
    for table in tables:
        spec = 'l' * table.text_columns + 'r' * (len(table.header) - table.text_columns)
        lines += ['', r'\begin{table}[t]', r'\centering',
                  f'\\caption{{{latex_escape(title)}: {latex_escape(table.caption)}}}',
                  f'\\begin{{tabular}}{{{spec}}}', r'\toprule',
                  ' & '.join(latex_escape(h) for h in table.header) + r' \\', r'\midrule']
        for row in table.rows:
            lines.append(' & '.join(latex_escape(table.cell(i, v, missing='–')) for i, v in enumerate(row))
                         + r' \\')
        lines += [r'\bottomrule', r'\end{tabular}', r'\end{table}']
    return '\n'.join(lines) + '\n'


def write_tables(out_dir: str, stem: str, title: str, tables: Sequence[ReportTable]) -> Dict[str, str]:
    """Write ``{stem}.tables.md`` (Markdown), ``{stem}.tables.tex`` (LaTeX, booktabs) and one
    ``{stem}.tables.{table name}.csv`` per table into ``out_dir`` (``tables.*`` when ``stem`` is empty).

    Returns ``{'markdown': path, 'latex': path, 'csv_{name}': path, ...}``.
    """
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f'{stem}.tables' if stem else 'tables')
    paths = {'markdown': base + '.md', 'latex': base + '.tex'}
    paths.update({f'csv_{t.name}': f'{base}.{t.name}.csv' for t in tables})
    with open(paths['markdown'], 'w', encoding='utf-8') as f:
        f.write(tables_markdown(title, tables))
    with open(paths['latex'], 'w', encoding='utf-8') as f:
        f.write(tables_latex(title, tables))
    for t in tables:
        with open(paths[f'csv_{t.name}'], 'w', encoding='utf-8', newline='') as f:
            f.write(table_csv(t))
    return paths


def _scene_graph_title(summary: Dict[str, Any], dataset: str, mode: str) -> str:
    return (f'{dataset} — {mode} ({summary.get("num_images", 0)} images evaluated'
            f'{", " + str(summary["num_samples"]) + " samples" if "num_samples" in summary else ""})')


def format_markdown_tables(summary: Dict[str, Any], ks: Sequence[Any], dataset: str, mode: str,
                           digits: int = 2, with_per_predicate: bool = True) -> str:
    """Markdown ready to paste into a paper (values in percent): the tables of :func:`scene_graph_tables`."""
    tables = scene_graph_tables(summary, ks, dataset, mode, with_per_predicate)
    for t in tables:
        t.digits = {i: digits for i in range(len(t.header))}
    return tables_markdown(_scene_graph_title(summary, dataset, mode), tables)


GROUP_COLORS = {'head': '#1f77b4', 'body': '#ff7f0e', 'tail': '#2ca02c'}


def plot_per_predicate_recall(summary: Dict[str, Any], path: str, k: Any, dataset: str, mode: str,
                              figsize: Optional[Sequence[float]] = None, dpi: int = 100,
                              order_note: Optional[str] = None) -> str:
    """Save :func:`per_predicate_figure` as a PNG of exactly ``figsize * dpi`` pixels; returns ``path``."""
    fig = per_predicate_figure(summary, k, dataset, mode, figsize, dpi, order_note)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


def per_predicate_figure(summary: Dict[str, Any], k: Any, dataset: str, mode: str,
                         figsize: Optional[Sequence[float]] = None, dpi: int = 100,
                         order_note: Optional[str] = None) -> Any:
    """Bar chart (a matplotlib ``Figure``) of per-predicate recall at ``k`` in the summary's order (training
    frequency when known; ``order_note`` replaces the title's line saying so, for another order).

    Bars are coloured by predicate group; contiguous runs of one group are shaded as bands and labelled
    (head / body / tail). A predicate without GT relations has no bar but a ``–`` (its recall does not exist).
    The title says how the recall averages over images. Size ``figsize`` inches (default width 0.32 in per
    predicate, at least 8 in; height 5 in) at ``dpi``. Drawn on an Agg canvas (no pyplot).
    """
    # the Agg canvas is used directly: no pyplot, no global backend switch, works headless
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    per_pred = summary.get('per_predicate') or {}
    names = list(per_pred)
    key = _per_predicate_key(k)
    has_gt = [bool(per_pred[n].get('num_gt', 0)) for n in names]
    values = [float(per_pred[n].get(key) or 0.0) if gt else 0.0 for n, gt in zip(names, has_gt)]
    group_of = _group_of(summary)
    groups = [group_of.get(n, '') for n in names]
    if figsize is None:
        figsize = (max(8.0, 0.32 * len(names) + 1.5), 5.0)
    fig = Figure(figsize=tuple(figsize), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    x = list(range(len(names)))
    palette = dict(GROUP_COLORS)
    extra = ['#9467bd', '#8c564b', '#e377c2', '#7f7f7f']
    for g in dict.fromkeys(groups):
        if g and g not in palette:
            palette[g] = extra[len(palette) % len(extra)]
    colors = [palette.get(g, '#7f7f7f') for g in groups]
    ax.bar(x, values, color=colors, width=0.8, zorder=2)
    top = max(values + [1.0])
    ymax = min(108.0, top * 1.15 + 1.0)
    ax.set_ylim(0, ymax)
    for i, gt in enumerate(has_gt):
        if not gt:  # no GT: no recall (not 0)
            ax.text(i, ymax * 0.01, MISSING, ha='center', va='bottom', fontsize=9, color='#555555', zorder=3)
    # bands: contiguous runs of one group
    start = 0
    for i in range(1, len(names) + 1):
        if i == len(names) or groups[i] != groups[start]:
            g = groups[start]
            if g:
                ax.axvspan(start - 0.5, i - 0.5, color=palette[g], alpha=0.08, zorder=0)
                if i - start >= 3:  # narrow runs are explained by the bar colours and the legend
                    ax.text((start + i - 1) / 2, ymax * 0.985, g, ha='center', va='top', fontsize=9,
                            color=palette[g], fontweight='bold')
                if start > 0:
                    ax.axvline(start - 0.5, color='#555555', lw=0.6, ls='--', zorder=1)
            start = i
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=90, fontsize=8)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel(f'{recall_key("R", k)} (%)')
    ax.grid(axis='y', alpha=0.3, zorder=1)
    m = summary.get('metrics', {})
    mr_key = recall_key('mR', k)
    mr_text = f' | {mr_key} = {_fmt(m[mr_key])}' if mr_key in m else ''
    k_text = 'all predictions (no K)' if _is_all(k) else f'K = {_k_label(k)}'
    average = {'image': 'image-averaged', 'micro': 'pooled over images'}.get(recall_average_of(summary) or '', '')
    ax.set_title(f'Per-predicate recall{" (" + average + ")" if average else ""} — {dataset} | {mode} | '
                 f'{k_text}{mr_text}\n{order_note or "predicates sorted by training frequency (when known)"}; '
                 f'{MISSING} = no GT',
                 fontsize=10)
    present = [g for g in dict.fromkeys(groups) if g]
    if present:
        ax.legend(handles=[Patch(color=palette[g], label=g) for g in present], loc='upper left',
                  bbox_to_anchor=(1.005, 1.0), fontsize=8, title='group', title_fontsize=8)
    fig.tight_layout()
    return fig


def write_scene_graph_reports(summary: Dict[str, Any], out_dir: str, prefix: str, ks: Sequence[Any],
                              dataset: str, mode: str, chart_k: Any = None,
                              figsize: Optional[Sequence[float]] = None, dpi: int = 100) -> Dict[str, str]:
    """Write the report files of one scene-graph evaluation into ``out_dir``.

    * ``{prefix}.metrics.json`` (``metrics.json`` when ``prefix`` is empty): dataset, mode, ks and the whole
      summary — every key (``metrics``), the per-predicate recalls, groups, counts (NaN -> null);
    * ``{prefix}.per_predicate.png``: :func:`plot_per_predicate_recall` at ``chart_k`` (default: ``'all'`` if in
      ``ks``, else the largest K);
    * ``{prefix}.tables.md`` / ``.tables.tex`` / ``.tables.{name}.csv``: :func:`scene_graph_tables` written by
      :func:`write_tables`.

    Returns ``{'json': path, 'png': path, 'markdown': path, 'latex': path, 'csv_main': path, ...}``.
    """
    os.makedirs(out_dir, exist_ok=True)
    stem = f'{prefix}.' if prefix else ''
    ks = list(ks)
    paths = {'json': os.path.join(out_dir, f'{stem}metrics.json'),
             'png': os.path.join(out_dir, f'{stem}per_predicate.png')}
    payload = {'dataset': dataset, 'mode': mode, 'ks': [_k_label(k) for k in ks]}
    payload.update(summary)
    _write_json(paths['json'], payload)
    plot_per_predicate_recall(summary, paths['png'], _chart_k(ks, chart_k), dataset, mode, figsize, dpi)
    paths.update(write_tables(out_dir, prefix, _scene_graph_title(summary, dataset, mode),
                              scene_graph_tables(summary, ks, dataset, mode)))
    _SCENE_GRAPH_TABLES[(os.path.abspath(out_dir), prefix)] = (summary, ks, dataset, mode)
    return paths


# (directory, stem) -> (summary, ks, dataset, mode) of the last scene-graph tables written there and not yet
# completed by add_detection_keys
_SCENE_GRAPH_TABLES: Dict[Tuple[str, str], Tuple[Dict[str, Any], List[Any], str, str]] = {}


def add_detection_keys(out_dir: str, stem: str, keys: Dict[str, float]) -> Optional[Dict[str, str]]:
    """Rewrite the tables of the scene-graph report last written to ``out_dir`` under ``stem`` (in this
    process, and not completed yet) with ``keys`` (DetectionAP's ``mAP`` / ``AP@50``) added to its main table;
    returns the table paths, or None when there is no such report. The summary's own keys are never replaced."""
    entry = _SCENE_GRAPH_TABLES.pop((os.path.abspath(out_dir), stem), None)
    if entry is None:
        return None
    summary, ks, dataset, mode = entry
    summary = dict(summary, metrics={**keys, **summary.get('metrics', {})})
    return write_tables(out_dir, stem, _scene_graph_title(summary, dataset, mode),
                        scene_graph_tables(summary, ks, dataset, mode))


def write_detection_reports(keys: Dict[str, float], counts: Dict[str, Any], out_dir: str, prefix: str,
                            dataset: str, mode: str, stem: Optional[str] = None) -> Dict[str, str]:
    """Report files of ``DetectionAP`` (keys in percent, unprefixed): ``{stem}.metrics.json`` (keys and
    counts), its tables ``{stem}.tables.*`` (``| Dataset | Mode | mAP | AP@50 |``; ``stem`` default
    ``{prefix}.detection``), and the keys added to the main table of the scene-graph report written under
    ``{prefix}`` just before (:func:`add_detection_keys`; keys ``merged_markdown`` ...)."""
    stem = stem or (f'{prefix}.detection' if prefix else 'detection')
    summary = {'metrics': dict(keys), **counts}
    paths = {'json': write_summary_json(summary, out_dir, stem)}
    paths.update(write_tables(out_dir, stem, f'{dataset} — {mode} detections ({counts.get("num_images", 0)} images)',
                              scene_graph_tables(summary, [], dataset, mode)))
    merged = add_detection_keys(out_dir, prefix, keys)
    paths.update({f'merged_{k}': v for k, v in (merged or {}).items()})
    return paths


def write_grounding_reports(summary: Dict[str, Any], out_dir: str, prefix: str, dataset: str) -> Dict[str, str]:
    """Report files of a ``GroundingPr`` evaluation: ``{prefix}.metrics.json`` (the summary, per-sample IoUs
    included) and the tables of :func:`grounding_tables` (``{prefix}.tables.md`` / ``.tex`` / ``.{name}.csv``)."""
    paths = {'json': write_summary_json(summary, out_dir, prefix)}
    title = (f'{dataset} — grounding ({summary.get("num_samples", 0)} samples, '
             f'{summary.get("num_without_prediction", 0)} without prediction)')
    paths.update(write_tables(out_dir, prefix, title, grounding_tables(summary, dataset)))
    return paths


def _write_json(path: str, payload: Dict[str, Any]) -> None:
    """``payload`` as strict JSON (NaN -> null), without the logged text and the list of report files."""
    payload = {k: v for k, v in payload.items() if k not in ('text', 'report_files')}
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(json_safe(payload), f, indent=2, allow_nan=False)


def write_summary_json(summary: Dict[str, Any], out_dir: str, prefix: str) -> str:
    """Write ``{prefix}.metrics.json`` (``metrics.json`` when ``prefix`` is empty): a metric's whole summary
    (every key under ``metrics``, counts, NaN -> null) into ``out_dir``; returns the path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f'{prefix}.metrics.json' if prefix else 'metrics.json')
    _write_json(path, summary)
    return path


def log_block(text: str) -> None:
    """Log a multi-line report through the runner's logger (or the current MMEngine logger)."""
    from mmengine.logging import MMLogger, print_log
    logger = MMLogger.get_current_instance() if MMLogger.check_instance_created('mmengine') else 'current'
    print_log('\n' + text, logger=logger)


def dump_metric_json(outfile_prefix: str, prefix: str, payload: Dict[str, Any]) -> str:
    """Write ``{outfile_prefix}.{prefix}.json`` (a metric's ``outfile_prefix`` dump); returns the path."""
    path = f'{outfile_prefix}.{prefix}.json'
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(payload, f, indent=2)
    return path


class OutputNotWritableError(OSError):
    """An output location (work dir, ``--out`` file's directory, a metric's report prefix) is not writable."""


def check_writable(directory: str, what: str) -> str:
    """Create ``directory`` if needed and write (then remove) a probe file in it; return its absolute path.

    Run it before evaluating, so that a run never computes its numbers only to fail saving them.
    ``what`` names the location in the error (e.g. ``'work dir (--work-dir)'``).
    """
    path = osp.abspath(directory)
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix='.mmsgg_eval_write_check_'):
            pass
    except OSError as err:
        blocked = next((p for p in _parents(path) if osp.exists(p) and not osp.isdir(p)), None)
        reason = f'{blocked} is a file, not a directory' if blocked else (err.strerror or str(err))
        raise OutputNotWritableError(f'{what} {path} is not writable ({reason}): files cannot be written there, so '
                                     f'nothing was evaluated (choose another location)') from err
    return path


def _parents(path: str) -> List[str]:
    """``path`` and its ancestors, nearest first."""
    out = [path]
    while osp.dirname(out[-1]) != out[-1]:
        out.append(osp.dirname(out[-1]))
    return out


# ---------------------------------------------------------------------------------------------- error analysis

def format_recall_lost(metrics: Dict[str, float], ks: Sequence[int], causes: Sequence[str]) -> List[str]:
    """One line per K: ``R@50 28.4 | lost: subject_loc 21.3, object_loc 19.8, ..., rank 3.1`` (percent, from the
    ``miss@K_{cause}`` keys of an error analysis; ``predicate_ng``, a subset of ``predicate``, in brackets)."""
    lines = []
    for k in ks:
        if f'R@{k}' not in metrics or not any(f'miss@{k}_{c}' in metrics for c in causes):
            continue
        lost = ', '.join(f'{c} {metrics[f"miss@{k}_{c}"]:.1f}' for c in causes if f'miss@{k}_{c}' in metrics)
        ng = metrics.get(f'miss@{k}_predicate_ng')
        lines.append(f'R@{k} {metrics[f"R@{k}"]:.1f} | lost: {lost}'
                     + (f' (predicate_ng {ng:.1f}: right predicate, not the top one)' if ng is not None else ''))
    if 'stage_inst_loc' in metrics:
        lines.append(f'instances (PySGG stage-wise): located {metrics["stage_inst_loc"]:.1f}, detected '
                     f'{metrics.get("stage_inst_det", float("nan")):.1f}')
    return lines


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
