"""Human-readable reports: the legacy-style ``SGG eval`` text block and per-predicate tables."""
from typing import Any, Dict, Sequence


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
    lines = [f'====== {metric_name} | mode={mode} | dataset={dataset} | images evaluated={summary["num_images"]}'
             f' (of {summary["num_samples"]}) | GT relations={summary["num_gt_relations"]} ======']
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
