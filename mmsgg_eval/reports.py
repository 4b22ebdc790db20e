"""Human-readable reports: the legacy-style ``SGG eval`` text block, per-predicate tables, and report files
(``metrics.json``, a per-predicate bar chart PNG, Markdown tables) written by :func:`write_scene_graph_reports`."""
import json
import os
import os.path as osp
import tempfile
from typing import Any, Dict, List, Optional, Sequence


def _family_line(name: str, keys: Dict[str, float], ks: Sequence[int], suffix: str = '') -> str:
    cells = [f'{name}@{k}{suffix}: {keys[f"{name}@{k}{suffix}"]:.4f}' for k in ks if f'{name}@{k}{suffix}' in keys]
    return '  '.join(cells)


FAMILY_TITLES = {
    'R': 'Recall', 'ngR': 'No-graph-constraint recall', 'zR': 'Zero-shot recall',
    'ngzR': 'No-graph-constraint zero-shot recall', 'A': 'Pair accuracy', 'mR': 'Mean recall',
    'ngmR': 'No-graph-constraint mean recall', 'F': 'F (2 R mR / (R + mR))', 'AVG': 'AVG ((R + mR) / 2)',
}


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
        lines.append(f'SGG eval: {_family_line(fam, keys, ks):<70s} for mode={mode}, type={title}.')
        for group in summary.get('groups', {}):
            if fam == 'mR' and any(f'mR@{k}_{group}' in keys for k in ks):
                lines.append(f'SGG eval: {_family_line("mR", keys, ks, "_" + group):<70s} '
                             f'for mode={mode}, type=Mean recall ({group} predicates).')
    zs = summary.get('zeroshot')
    if zs and any(k.startswith(('zR', 'ngzR')) for k in keys):
        lines.append(f'Zero-shot set: {zs["size"]} triplets ({zs["source"]}), sha1 {zs["sha1"]}')
    if with_per_predicate and summary.get('per_predicate'):
        lines.append(format_per_predicate_table(summary['per_predicate'], ks, mode))
    return '\n'.join(lines)


def format_per_predicate_table(per_predicate: Dict[str, Dict[str, float]], ks: Sequence[int], mode: str) -> str:
    """Fixed-width per-predicate recall table (rows in the given order: training frequency when known)."""
    name_w = max([len('predicate')] + [len(p) for p in per_predicate])
    header = f'{"predicate":<{name_w}}  {"#GT":>7}  ' + '  '.join(f'{"R@" + str(k):>8}' for k in ks)
    lines = [f'Per-predicate recall ({mode}, sorted by training frequency when known):', header,
             '-' * len(header)]
    for name, row in per_predicate.items():
        lines.append(f'{name:<{name_w}}  {row.get("num_gt", 0):>7d}  '
                     + '  '.join(f'{row[f"R@{k}"]:>8.2f}' for k in ks))
    return '\n'.join(lines)


# ---------------------------------------------------------------------------------------------- report files
# ``write_scene_graph_reports`` turns the summary of a scene-graph evaluation (``metric.last_report`` of
# SGRecall / SGMeanRecall / VLMSceneGraphMetric) into files a person can look at. A K is an int (keys
# ``R@K``, ``mR@K``, ``mR@K_head`` and per-predicate ``R@K``) or the string ``'all'`` for the K-free keys of the
# VLM metric (``Recall``, ``mRecall``, ``mRecall_head`` and per-predicate ``Recall``).

GROUP_ORDER = ('head', 'body', 'tail')
HEADLINE_EXTRA = ('AP@50', 'FailureRate')


def _k_label(k: Any) -> str:
    return 'all' if _is_all(k) else str(int(k))


def _is_all(k: Any) -> bool:
    return k is None or (isinstance(k, str) and k.lower() in ('all', 'inf'))


def recall_key(family: str, k: Any, suffix: str = '') -> str:
    """Metric key of a recall family at K: ``('R', 50) -> 'R@50'``, ``('mR', 'all', '_tail') -> 'mRecall_tail'``."""
    if _is_all(k):
        return {'R': 'Recall', 'mR': 'mRecall'}[family] + suffix
    return f'{family}@{int(k)}{suffix}'


def _per_predicate_key(k: Any) -> str:
    return 'Recall' if _is_all(k) else f'R@{int(k)}'


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


def _fmt(value: Any, digits: int = 2) -> str:
    import math
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return '–'
    return f'{float(value):.{digits}f}'


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
    ints = [int(k) for k in ks]
    return max(ints) if ints else 'all'


def format_markdown_tables(summary: Dict[str, Any], ks: Sequence[Any], dataset: str, mode: str,
                           digits: int = 2, with_per_predicate: bool = True) -> str:
    """Markdown ready to paste into a paper (values in percent).

    1. main table: ``| Dataset | Mode | R@K ... | mR@K ... |`` (+ ``AP@50`` / ``FailureRate`` when present);
    2. head/body/tail mean recall for each K (when groups are known);
    3. per-predicate recall for each K, in the summary's order (training frequency when known), with the
       predicate's group and GT count.
    """
    m = summary.get('metrics', {})
    lines = [f'### {dataset} — {mode} ({summary.get("num_images", 0)} images evaluated'
             f'{", " + str(summary["num_samples"]) + " samples" if "num_samples" in summary else ""})', '']
    cols = [recall_key('R', k) for k in ks] + [recall_key('mR', k) for k in ks]
    cols = [c for c in cols if c in m] + [c for c in HEADLINE_EXTRA if c in m]
    lines.append('| Dataset | Mode | ' + ' | '.join(cols) + ' |')
    lines.append('|---|---|' + '---:|' * len(cols))
    lines.append(f'| {dataset} | {mode} | ' + ' | '.join(_fmt(m[c], digits) for c in cols) + ' |')
    groups = _ordered_groups(summary)
    if groups:
        gcols = [(k, g) for k in ks for g in groups if recall_key('mR', k, '_' + g) in m]
        if gcols:
            lines += ['', '| Dataset | Mode | ' + ' | '.join(f'{recall_key("mR", k)} {g}' for k, g in gcols) + ' |',
                      '|---|---|' + '---:|' * len(gcols),
                      f'| {dataset} | {mode} | '
                      + ' | '.join(_fmt(m[recall_key('mR', k, '_' + g)], digits) for k, g in gcols) + ' |']
    per_pred = summary.get('per_predicate') or {}
    if with_per_predicate and per_pred:
        group_of = _group_of(summary)
        pcols = [k for k in ks if any(_per_predicate_key(k) in row for row in per_pred.values())]
        lines += ['', '| Predicate | Group | #GT | ' + ' | '.join(recall_key('R', k) for k in pcols) + ' |',
                  '|---|---|---:|' + '---:|' * len(pcols)]
        for name, row in per_pred.items():
            lines.append(f'| {name} | {group_of.get(name, "")} | {int(row.get("num_gt", 0))} | '
                         + ' | '.join(_fmt(row.get(_per_predicate_key(k)), digits) for k in pcols) + ' |')
    return '\n'.join(lines) + '\n'


GROUP_COLORS = {'head': '#1f77b4', 'body': '#ff7f0e', 'tail': '#2ca02c'}


def plot_per_predicate_recall(summary: Dict[str, Any], path: str, k: Any, dataset: str, mode: str,
                              figsize: Optional[Sequence[float]] = None, dpi: int = 100) -> str:
    """Bar chart of per-predicate recall at ``k`` in the summary's order (training frequency when known).

    Bars are coloured by predicate group; contiguous runs of one group are shaded as bands and labelled
    (head / body / tail). The image is exactly ``figsize * dpi`` pixels (default width 0.32 in per predicate,
    at least 8 in; height 5 in). Drawn on an Agg canvas (no pyplot); returns ``path``.
    """
    # the Agg canvas is used directly: no pyplot, no global backend switch, works headless
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    per_pred = summary.get('per_predicate') or {}
    names = list(per_pred)
    key = _per_predicate_key(k)
    values = [float(per_pred[n].get(key) or 0.0) for n in names]
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
    k_text = 'all predictions (no K)' if _is_all(k) else f'K = {int(k)}'
    ax.set_title(f'Per-predicate recall — {dataset} | {mode} | {k_text}{mr_text}\n'
                 f'predicates sorted by training frequency (when known)', fontsize=10)
    present = [g for g in dict.fromkeys(groups) if g]
    if present:
        ax.legend(handles=[Patch(color=palette[g], label=g) for g in present], loc='upper left',
                  bbox_to_anchor=(1.005, 1.0), fontsize=8, title='group', title_fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


def write_scene_graph_reports(summary: Dict[str, Any], out_dir: str, prefix: str, ks: Sequence[Any],
                              dataset: str, mode: str, chart_k: Any = None,
                              figsize: Optional[Sequence[float]] = None, dpi: int = 100) -> Dict[str, str]:
    """Write the report files of one scene-graph evaluation into ``out_dir``.

    * ``{prefix}.metrics.json`` (``metrics.json`` when ``prefix`` is empty): dataset, mode, ks and the whole
      summary — every key (``metrics``), the per-predicate recalls, groups, counts (NaN -> null);
    * ``{prefix}.per_predicate.png``: :func:`plot_per_predicate_recall` at ``chart_k`` (default: ``'all'`` if in
      ``ks``, else the largest K);
    * ``{prefix}.tables.md``: :func:`format_markdown_tables`.

    Returns ``{'json': path, 'png': path, 'markdown': path}``.
    """
    os.makedirs(out_dir, exist_ok=True)
    stem = f'{prefix}.' if prefix else ''
    ks = list(ks)
    paths = {'json': os.path.join(out_dir, f'{stem}metrics.json'),
             'png': os.path.join(out_dir, f'{stem}per_predicate.png'),
             'markdown': os.path.join(out_dir, f'{stem}tables.md')}
    payload = {'dataset': dataset, 'mode': mode, 'ks': [_k_label(k) for k in ks]}
    payload.update(summary)
    _write_json(paths['json'], payload)
    plot_per_predicate_recall(summary, paths['png'], _chart_k(ks, chart_k), dataset, mode, figsize, dpi)
    with open(paths['markdown'], 'w', encoding='utf-8') as f:
        f.write(format_markdown_tables(summary, ks, dataset, mode))
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
