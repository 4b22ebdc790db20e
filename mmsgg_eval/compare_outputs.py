"""What a comparison of runs (:func:`mmsgg_eval.compare.compare_runs`, JSON-ready) becomes for a reader: the
Markdown report with a verdict line on the headline keys (also printed), the CSV files of keys and per-predicate
rows, ``compare.json``, the chart of Δ per predicate with its interval, and the ``--report`` files of the GT
relations gained and lost (``changes.md`` / ``changes.json``). Nothing here computes a number.
"""
import json
import os
import os.path as osp
from typing import Any, Dict, List, Optional, Tuple

OUTPUT_STEM = 'compare'


def _num(value: float, digits: int = 2, sign: bool = False) -> str:
    return '–' if value != value else f'{value:+.{digits}f}' if sign else f'{value:.{digits}f}'


def _p(value: float) -> str:
    return '–' if value != value else (f'{value:.3f}' if value >= 0.001 else '<0.001')


#: Keys of the verdict line (the headline numbers of each metric kind), in this order, when present.
MAIN_KEYS = ('R@50', 'mR@50', 'Recall', 'mRecall', 'Pr@0.5', 'mAP', 'AP@50', 'RelCLIPScore')


def verdict_line(comp: Dict[str, Any], level: float) -> str:
    """One sentence on the main keys (:data:`MAIN_KEYS`) of a comparison: for each, Δ and whether its
    interval excludes 0, with the caveat that many keys are tested at once."""
    alpha = 1 - level
    every: Dict[str, Any] = {}
    for m in comp['metrics']:
        for key, r in m['keys'].items():
            every.setdefault(key, r)
    tested = sum(len(m['keys']) for m in comp['metrics'])
    found = [(key, every[key]) for key in MAIN_KEYS if key in every]
    if not found:
        return ''
    parts = []
    for key, r in found:
        if r['p'] < alpha and r['delta'] != 0:
            word = 'better' if r['delta'] > 0 else 'worse'
            parts.append(f'{key} {r["delta"]:+.2f} ({comp["b"]} {word}, p {_p(r["p"])})')
        else:
            parts.append(f'{key} {r["delta"]:+.2f} (no significant difference, p {_p(r["p"])})')
    return (f'**Verdict** ({comp["b"]} vs {comp["a"]}, α = {alpha:.2f}): ' + '; '.join(parts) +
            f'. These p-values are not corrected across the {tested} keys of the table: with that many tests a '
            f'few p < {alpha:.2f} are expected by chance, so decide on the key chosen in advance and read the '
            f'others as exploratory.')


def format_markdown(result: Dict[str, Any]) -> str:
    """The Markdown report of :func:`compare_runs` (names, keys and predicates through the one Markdown cell
    escaper, :func:`mmsgg_eval.reports.markdown_cell`)."""
    from .reports import markdown_cell as cell
    info = result['bootstrap']
    pct = f'{100 * info["level"]:g}%'
    lines = []
    for comp in result['comparisons']:
        a, b = cell(comp['a']), cell(comp['b'])
        verdict = verdict_line(comp, info['level'])
        lines += [f'## {b} vs {a}', ''] + ([verdict, ''] if verdict else []) + [
                  f'Paired bootstrap: {info["samples"]} resamples of the images with replacement, the same image '
                  f'indices for both runs; Δ = {b} − {a}; {pct} percentile interval of Δ; two-sided p-value '
                  f'(seed {info["seed"]}).', '']
        for m in comp['metrics']:
            lines.append(f'### {cell(m["metric"])}, {m["num_images"]} images')
            if m['settings_differences']:
                lines += ['', '**Different settings (--allow-different-settings):** '
                          + '; '.join(cell(d) for d in m['settings_differences'])]
            lines += ['', f'| Key | {a} | {b} | Δ | {pct} CI of Δ | p |', '|---|---:|---:|---:|---:|---:|']
            notes = m.get('interval_notes') or {}
            for key, r in m['keys'].items():
                note = f' unreliable: {notes[key]}' if key in notes else ''
                lines.append(f'| {cell(key)} | {_num(r["a"])} | {_num(r["b"])} | {_num(r["delta"], sign=True)} | '
                             f'[{_num(r["low"])}, {_num(r["high"])}]{note} | {_p(r["p"])} |')
            if notes:
                lines += ['', 'unreliable: the interval of Δ (and its p-value) of a key averaging over predicates '
                              'of which many are rare or absent in these images (docs/metrics.md).']
            lines += [''] + per_predicate_markdown(m['per_predicate'], a, b, pct)
        if comp.get('not_compared'):
            lines += ['Not compared (keys without a per-image decomposition, so no paired bootstrap): '
                      + ', '.join(cell(n) for n in comp['not_compared']) + '.', '']
    return '\n'.join(lines).rstrip() + '\n'


def per_predicate_markdown(pp: Optional[Dict[str, Any]], a: str, b: str, pct: str) -> List[str]:
    """Markdown lines of a per-predicate comparison (none when there is none); ``a`` / ``b``: the run names,
    already escaped."""
    from .reports import markdown_cell as cell
    if not pp:
        return []
    rows = [r for r in pp['rows'] if r['num_gt_a'] + r['num_gt_b'] > 0]
    lines = [f'Per-predicate {cell(pp["key"])} ({len(pp["rows"]) - len(rows)} predicates without GT in the images '
             f'left out):', '', f'| Predicate | #GT | {a} | {b} | Δ | {pct} CI of Δ | p | p (Holm) |',
             '|---|---:|---:|---:|---:|---:|---:|---:|']
    for r in rows:
        mark = ' **\\***' if r['significant'] else ''
        lines.append(f'| {cell(r["predicate"])}{mark} | {r["num_gt_a"]} | {_num(r["a"])} | {_num(r["b"])} | '
                     f'{_num(r["delta"])} | [{_num(r["low"])}, {_num(r["high"])}] | {_p(r["p"])} | '
                     f'{_p(r["p_holm"])} |')
    changed = ', '.join(cell(name) for name in pp['significant']) or 'none'
    lines += ['', f'Changed significantly (Holm correction over the {pp["num_tested"]} predicates with GT, '
                  f'family-wise α = {pp["alpha"]:.2f}; marked \\*): {changed}.', '']
    return lines


def csv_rows(result: Dict[str, Any]) -> Tuple[List[List[Any]], List[List[Any]]]:
    """(key rows, per-predicate rows) of the CSV files, with headers."""
    keys = [['a', 'b', 'metric', 'key', 'value_a', 'value_b', 'delta', 'low', 'high', 'p', 'settings_differences',
             'unreliable']]
    preds = [['a', 'b', 'metric', 'key', 'predicate', 'num_gt_a', 'num_gt_b', 'value_a', 'value_b', 'delta', 'low',
              'high', 'p', 'p_holm', 'significant']]
    for comp in result['comparisons']:
        for m in comp['metrics']:
            notes = m.get('interval_notes') or {}
            for key, r in m['keys'].items():
                keys.append([comp['a'], comp['b'], m['metric'], key, r['a'], r['b'], r['delta'], r['low'], r['high'],
                             r['p'], '; '.join(m['settings_differences']), notes.get(key, '')])
            pp = m['per_predicate']
            for r in (pp['rows'] if pp else []):
                preds.append([comp['a'], comp['b'], m['metric'], pp['key'], r['predicate'], r['num_gt_a'],
                              r['num_gt_b'], r['a'], r['b'], r['delta'], r['low'], r['high'], r['p'], r['p_holm'],
                              r['significant']])
    return keys, preds


def plot_deltas(result: Dict[str, Any], path: str) -> Optional[str]:
    """Bar chart of the per-predicate Δ with their intervals (significant ones in color; predicates with GT),
    one panel per comparison with a per-predicate table; None when there is none."""
    panels = [(c, m['per_predicate'], m['metric']) for c in result['comparisons'] for m in c['metrics']
              if m['per_predicate']]
    if not panels:
        return None
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    width = max(6.0, 0.22 * max(len(pp['rows']) for _, pp, _ in panels) + 2)
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 3.6 * len(panels)), squeeze=False)
    for ax, (comp, pp, metric) in zip(axes[:, 0], panels):
        rows = [r for r in pp['rows'] if r['num_gt_a'] + r['num_gt_b'] > 0] or pp['rows']  # predicates with GT
        delta = [r['delta'] for r in rows]
        err = [[max(r['delta'] - r['low'], 0) for r in rows], [max(r['high'] - r['delta'], 0) for r in rows]]
        colors = ['#d62728' if r['significant'] else '#7f7f7f' for r in rows]
        ax.bar(range(len(rows)), delta, yerr=err, color=colors, capsize=2, zorder=2)
        ax.axhline(0, color='black', linewidth=0.8)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r['predicate'] for r in rows], rotation=90, fontsize=7)
        ax.set_ylabel(f'Δ {pp["key"]} (pp)')
        ax.set_title(f'{comp["b"]} − {comp["a"]}: {metric} (red: significant after Holm)', fontsize=9)
        ax.grid(axis='y', alpha=0.3, zorder=1)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_outputs(result: Dict[str, Any], out_dir: str) -> Dict[str, str]:
    """Write ``compare.md``, ``compare.csv``, ``compare.per_predicate.csv``, ``compare.json`` and the chart."""
    import csv
    from .reports import json_safe
    os.makedirs(out_dir, exist_ok=True)
    base = osp.join(out_dir, OUTPUT_STEM)
    paths = {'markdown': base + '.md', 'csv': base + '.csv', 'per_predicate_csv': base + '.per_predicate.csv',
             'json': base + '.json'}
    with open(paths['markdown'], 'w') as f:
        f.write(format_markdown(result))
    for name, rows in zip(('csv', 'per_predicate_csv'), csv_rows(result)):
        with open(paths[name], 'w', newline='') as f:
            csv.writer(f, lineterminator='\n').writerows(rows)
    with open(paths['json'], 'w') as f:
        json.dump(json_safe(result), f, indent=1)
    chart = plot_deltas(result, base + '.per_predicate.png')
    if chart:
        paths['chart'] = chart
    return paths


def write_changes(result: Dict[str, Any], report_dir: str) -> Dict[str, str]:
    """Write ``changes.md`` and ``changes.json`` (the GT relations gained and lost, every comparison and metric)
    into ``report_dir``."""
    from .analysis.relation_changes import changes_markdown
    from .reports import json_safe
    os.makedirs(report_dir, exist_ok=True)
    listed, skipped = [], []
    for comp in result['comparisons']:
        for m in comp['metrics']:
            ch = m.get('relation_changes')
            if ch is None:
                continue
            if 'unavailable' in ch:
                skipped.append(ch['unavailable'])
            elif not any(x['metric'] == (m['prefix'] or m['metric'])
                         and (x['a'], x['b'], x['k']) == (ch['a'], ch['b'], ch['k']) for x in listed):
                listed.append({'metric': m['prefix'] or m['metric'], **ch})  # one list per prefix (same rows)
    text = changes_markdown(listed)
    if skipped:
        text += '\n' + '\n'.join(f'Not listed: {s}' for s in sorted(set(skipped))) + '\n'
    paths = {'changes_markdown': osp.join(report_dir, 'changes.md'),
             'changes_json': osp.join(report_dir, 'changes.json')}
    with open(paths['changes_markdown'], 'w') as f:
        f.write(text)
    with open(paths['changes_json'], 'w') as f:
        json.dump(json_safe({'changes': listed, 'not_listed': sorted(set(skipped))}), f, indent=1)
    return paths

