"""The long-tail chart: per-predicate recall at one K as a bar chart (PNG), coloured by predicate group."""
import os
from typing import Any, Dict, Optional, Sequence

from .values import MISSING, _k_label, _is_all, recall_key, _per_predicate_key, _fmt, _group_of, recall_average_of


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
