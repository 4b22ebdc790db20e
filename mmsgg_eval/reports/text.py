"""The logged text blocks: the legacy-style ``SGG eval`` lines of a scene-graph summary, the per-predicate table and
where recall is lost."""
from typing import Any, Dict, List, Optional, Sequence

from ..keys import FAMILY_TITLES, subset_families
from .values import _fmt, recall_average_of


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
    if zs and any(k.split('@')[0] in subset_families('zeroshot') for k in keys):
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


def log_block(text: str) -> None:
    """Log a multi-line report through the runner's logger (or the current MMEngine logger)."""
    from mmengine.logging import MMLogger, print_log
    logger = MMLogger.get_current_instance() if MMLogger.check_instance_created('mmengine') else 'current'
    print_log('\n' + text, logger=logger)


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
